"""What a run observed and how it is written out: `recorder` (typed spans, HBM traffic and samples,
events, memory peaks; the only writer of them), `tracks` (the timeline's track names, order and
ids), `lanes` (overlapping slices of one track dealt onto display lanes, so a Perfetto thread's
slices nest), `summary` (the run summary and its table, DMA queue statistics derived from the
spans), `perfetto` (Chrome trace JSON), `profile` (the per-instruction table, CSV or Parquet);
`files` (every output file written whole or not at all, and output paths checked)."""
