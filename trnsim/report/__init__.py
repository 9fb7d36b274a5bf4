"""What a run observed and how it is written out: `recorder` (spans, counters, peaks),
`summary` (the run summary and its table), `perfetto` (Chrome trace JSON) and `profile`
(the per-instruction table, CSV or Parquet)."""
