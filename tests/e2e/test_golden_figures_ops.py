"""The golden figures of the ops traces (mlp_ops, attention_ops, the Llama-70B layer in prefill and
decode), derived by hand: each op row's FLOPs, bytes and roofline bounds, and the run's totals
(test_golden_figures.py says how exact each figure must be)."""

from __future__ import annotations

from fractions import Fraction

from tests.e2e.golden_model import (
    PS,
    assert_flops,
    by_name,
    golden,
    peak_per_core,
    ratio,
    seconds_ps,
)

# -- the per-op rows of ops traces (`ops`: kernels/roofline.py) --------------------------------------


def assert_op_row(row: dict, cfg, cores: int, flops: int, read: int, written: int, device_ps):
    """An op row's bounds by hand: FLOPs over the cores' bf16 TensorE peak; the bytes it reads
    (once) over the cores' DMA load bandwidth plus those it writes over their store bandwidth;
    all its bytes through one HBM stack. The roofline is the largest of the three, the
    fraction roofline / time, and the op's span lies within the (one) launch."""
    d = cfg.core.dma
    compute = Fraction(flops) / (cores * peak_per_core(cfg)) * 10**9
    dma = (
        (
            Fraction(read) / Fraction(d.engine_bandwidth)
            + Fraction(written) / Fraction(d.store_bandwidth)
        )
        / (d.engines * cores)
        * 10**9
    )
    hbm = Fraction(read + written) / (Fraction(cfg.hbm.bandwidth) / cfg.hbm.stacks) * 10**9
    assert (row["flops"], row["bytes_read"], row["bytes_written"]) == (flops, read, written)
    assert row["compute_bound_ns"] == ratio(compute)
    assert row["dma_bound_ns"] == ratio(dma) and row["hbm_bound_ns"] == ratio(hbm)
    bound, which = max((compute, "compute"), (dma, "dma"), (hbm, "hbm"))
    assert row["bound"] == which and row["roofline_ns"] == ratio(bound)
    assert row["launches"] == 1 and 0 < row["time_ns"] * 1000 <= device_ps
    assert row["fraction"] == ratio(row["roofline_ns"] / row["time_ns"])


# -- mlp_ops: three high-level ops lowered by the kernel library -----------------------------------


@by_name("mlp_ops")
def test_mlp_ops(name):
    """Exact FLOPs and HBM bytes from the shapes, the ops split over the two cores of LNC 2;
    the device time above its roofline bound and within 2.5 times it
    (traces/mlp_ops.yaml's header)."""
    g, cfg = golden(name)
    cores = cfg.lnc
    m, k, n = 512, 1024, 2048
    spread = 2 * 1 * 128 * n  # the K = 1 matmul spreading the bias, on every core
    assert g["flops"] == 2 * m * k * n + cores * spread
    x, w, bias, h = m * k * 2, k * n * 2, n * 4, m * n * 2  # bytes
    read = x + cores * (w + bias) + 2 * h  # every core streams all of w; add and GELU read h
    assert g["hbm"]["bytes_read"] == read
    assert g["hbm"]["bytes_written"] == 3 * h
    d = cfg.core.dma
    load, store = d.engines * d.engine_bandwidth / PS, d.engines * d.store_bandwidth / PS
    tensor = Fraction(g["flops"] // cores) / (peak_per_core(cfg) / PS)
    dma = (read / cores) / load + (3 * h / cores) / store
    stack = (read + 3 * h) / (cfg.hbm.bandwidth / cfg.hbm.stacks / PS)  # one stack for both
    low = max(tensor, dma, stack)
    device = g["device_time_ns"] * 1000
    assert low < device < 2.5 * low
    # a row per op (the add's bias has another shape than h: no fusion)
    mm, add, gelu = g["ops"]
    assert [r["op"] for r in g["ops"]] == ["matmul", "add", "gelu"]
    assert mm["shapes"] == {"x": [m, k], "w": [k, n], "h": [m, n]}
    assert add["dtypes"] == {"h": "bfloat16", "bias": "float32"}
    assert_op_row(mm, cfg, cores, 2 * m * k * n, x + w, h, device)  # compute-bound
    assert_op_row(add, cfg, cores, 0, h + bias, h, device)
    assert_op_row(gelu, cfg, cores, 0, h, h, device)
    assert mm["bound"] == "compute" and add["bound"] == gelu["bound"] == "hbm"
    # the ops follow one another (each waits for the one before): their spans cover the run
    assert sum(r["time_ns"] for r in g["ops"]) * 1000 >= device


# -- attention_ops: causal grouped-query attention as one fused op ---------------------------------


@by_name("attention_ops")
def test_attention_ops(name):
    """FLOPs and HBM bytes of a causal flash attention, by hand (traces/attention_ops.yaml)."""
    g, cfg = golden(name)
    heads, s, d, qb = 8, 512, 64, 128  # query heads, tokens, head dim, queries per block
    blocks = s // qb
    ends = [(i + 1) * qb for i in range(blocks)]  # each query block stops at the diagonal
    keys = sum(ends)  # every block's keys fit one key block of 1,024: one unit each
    scores = 2 * d * qb * keys
    pv = 2 * qb * keys * (d + 1)  # P v with v's ones column: the row sums come with it
    mask = blocks * 2 * qb * qb * qb  # per diagonal, identity [128, 128] x bias [128, 128]
    assert g["flops"] == heads * (scores + pv + mask)
    q_bytes, out_bytes = heads * s * d * 2, heads * s * d * 4
    # k and v are loaded once for each pair of query blocks, as far as its second one reads
    kv_bytes = heads * sum(ends[1::2]) * d * 2
    assert g["hbm"]["bytes_read"] == q_bytes + 2 * kv_bytes
    assert g["hbm"]["bytes_written"] == out_bytes
    # its row: the unmasked (query, key) pairs only, s (s + 1) / 2 per head (the kernel also
    # computes the masked half of each diagonal block); q, k, v read once
    (row,) = g["ops"]
    kv_heads = 2
    pairs = s * (s + 1) // 2
    read = q_bytes + 2 * kv_heads * s * d * 2
    device = round(g["device_time_ns"] * 1000)
    assert_op_row(row, cfg, cfg.lnc, heads * 2 * 2 * d * pairs, read, out_bytes, device)
    assert row["time_ns"] == g["device_time_ns"] and row["bound"] == "hbm"


# -- llama70b_prefill_ops / llama70b_decode_ops: a decoder layer as 12 kernels of ops -----------

HID, QH, KVH, HD, MLP = 8192, 64, 8, 128, 28672  # hidden, query heads, kv heads, head dim, MLP


def llama_rows(s: int, cache: int | None) -> list[tuple]:
    """(kernel, op, FLOPs, bytes read, bytes written) of each op row of the layer, by hand:
    `s` tokens (the sequence in prefill, the batch in decode); `cache`: decode's KV cache
    length (None: prefill, causal self-attention over the s tokens)."""
    act, kv = s * HID * 2, s * KVH * HD * 2  # [s, 8192] and [s, 1024] in bf16
    norm = ("rms_norm", 0, act + HID * 2, act)  # x and the weight in, xn out

    def proj(n, k, out_bytes):  # a linear with an [n, k] weight: its bytes and s tokens'
        return 2 * s * n * k, n * k * 2 + s * k * 2, out_bytes

    if cache is None:  # the heads brought to [1, H, S, D] and back by transposes
        attn = ("scaled_dot_product_attention", 2 * 2 * HD * (s * (s + 1) // 2) * QH,
                act + 2 * kv, act)  # fmt: skip
        heads = [("heads", "transpose", 0, b, b) for b in (act, kv, kv)]
        mid = [
            ("attention", *attn),
            ("unheads", "transpose", 0, act, act),
            ("o_proj", "matmul", *proj(HID, HID, act)),
        ]
        down, tail = ("down_proj", "linear"), []
    else:  # each query (token) meets the cache's keys; the cache read once per kv head
        kv_cache = 2 * s * KVH * cache * HD * 2
        heads = [("heads", "transpose", 0, b, b) for b in (act, kv, kv)]
        mid = [
            (
                "attention",
                "scaled_dot_product_attention",
                2 * 2 * HD * cache * s * QH,
                act + kv_cache,
                act,
            ),  # fmt: skip
            ("o_proj", "linear", *proj(HID, HID, act)),
        ]
        down, tail = ("down_proj", "matmul"), [("final", "transpose", 0, act, act)]
    return [
        ("norm1", *norm),
        ("q_proj", "linear", *proj(HID, HID, act)),
        ("k_proj", "linear", *proj(KVH * HD, HID, kv)),
        ("v_proj", "linear", *proj(KVH * HD, HID, kv)),
        *heads,
        *mid,
        ("residual", "transpose", 0, act, act),
        ("residual", "add", 0, 2 * act, act),
        ("residual", *norm),
        ("gate_proj", "linear", *proj(MLP, HID, s * MLP * 2)),
        ("up_proj", "linear", *proj(MLP, HID, s * MLP * 2)),
        ("up_proj", "silu+mul", 0, 2 * s * MLP * 2, s * MLP * 2),  # fused: gate written once
        (*down, 2 * s * HID * MLP, HID * MLP * 2 + s * MLP * 2, act),
        *tail,
        ("final" if tail else "down_proj", "add", 0, 2 * act, act),
    ]


def assert_llama_layer(name: str, s: int, cache: int | None):
    g, cfg = golden(name)
    assert g["mode"] == "timing" and g["lnc"] == cfg.lnc == 2
    device = round(g["device_time_ns"] * 1000)
    want = llama_rows(s, cache)
    assert [(r["kernel"], r["op"]) for r in g["ops"]] == [w[:2] for w in want]
    for row, (_k, _op, flops, read, written) in zip(g["ops"], want):
        assert_op_row(row, cfg, cfg.lnc, flops, read, written, device)
        assert row["fraction"] <= 1  # a roofline is a lower bound
    # the 12 kernels run one after another on one stream: the ops' rooflines add up to less
    # than the device time; the host's first launch costs it launch_overhead, the others are
    # enqueued while the device works
    assert sum(r["roofline_ns"] for r in g["ops"]) * 1000 < device
    launch = seconds_ps(cfg.host_link.launch_overhead)
    assert round(g["total_time_ns"] * 1000) == device + launch
    # the FLOPs TensorE runs: the rows' matmuls; attention's as the kernel computes them (in
    # prefill each 128-query block i also computes the masked part of its diagonal block: keys
    # up to 128 (i + 1), plus the mask's bias matmul, identity [128, 128] x bias [128, 128];
    # P v has v's ones column, whose result is the row sum); in prefill each rms_norm spreads
    # its weight over the partitions with a K = 1 matmul on each core (2 x 128 x 8192); in
    # decode the 128 rows (rows of 16 KiB, fewer than 256: the op is isolated, its rows cut
    # evenly, 64 to each core, kernels/rows.py core_share) go in pieces (kernels/row_pieces.py:
    # 4 pieces of 2048, 32 rows a tile, 2 tiles a core), each tile's mean of x^2 summed over a
    # row's partitions by one matmul ([128, 128] x [128, 1]), after each core makes the
    # block-diagonal ones matrix once (E^T E, E [32, 128]), and the weight loaded in the
    # pieces' pattern by DMA
    mm = sum(w[2] for w in want if w[1] in ("linear", "matmul"))
    if cache is None:
        keys = [128 * (i + 1) for i in range(s // 128)]
        attention = QH * sum(2 * 128 * k * (2 * HD + 1) + 2 * 128**3 for k in keys)
    else:
        attention = next(w[2] for w in want if w[0] == "attention") + 2 * cache * s * QH
    if cache is None:
        spread, fp32 = 2 * cfg.lnc * 2 * 128 * HID, 0
    else:  # fp32 matmuls (the statistics' sums)
        spread = fp32 = 2 * (cfg.lnc * 2 * 128 * 32 * 128 + 4 * 2 * 128 * 128)
    assert_flops(g, cfg, mm + attention + spread, device, compute_cores=cfg.lnc, fp32=fp32)
    return g, cfg, device


@by_name("llama70b_prefill_ops")
def test_llama70b_prefill_ops(name):
    """Each op row's FLOPs, bytes and bounds by hand (traces/llama70b_prefill_ops.yaml)."""
    g, cfg, device = assert_llama_layer(name, 2048, None)
    rows = {(r["kernel"], r["op"]): r for r in g["ops"]}
    assert rows[("q_proj", "linear")]["compute_bound_ns"] == ratio(
        Fraction(2 * 2048 * HID * HID) / (2 * peak_per_core(cfg)) * 10**9
    )
    compute = [r for r in g["ops"] if r["flops"]]
    assert all(r["bound"] == "compute" for r in compute) and len(compute) == 8
    assert all(r["bound"] == "hbm" for r in g["ops"] if not r["flops"])
    # the header's sum of rooflines (23.97 ms) and its run (25.65 ms)
    assert round(sum(r["roofline_ns"] for r in g["ops"]) / 1e4) == 2397
    assert round(device / 1e7) == 2565
    # down_proj (K = 28672) streams K: per core, w_down's 4096 rows are read once per N block
    # of 512 (4 of them) and the activations once per strip of 8 x 128 rows (4 of them):
    # 4 x 235 MB + 4 x 117 MB = 1.41 GB at 16 x 23 x 0.9 GB/s >= 4.25 ms, under its 6.12 ms of
    # compute: the header expects it compute-bound, like gate_proj and up_proj
    for k in ("gate_proj", "up_proj", "down_proj"):
        assert rows[(k, "linear")]["fraction"] > 0.95


@by_name("llama70b_prefill_one_kernel")
def test_llama70b_prefill_one_kernel(name):
    """The prefill layer as one kernel of its 19 ops (traces/llama70b_prefill_one_kernel.yaml,
    issue 27): each op row's FLOPs, bytes and bounds as the 12 kernels' (the same ops, every
    row in kernel `layer`), the same FLOPs and HBM bytes in all, and a device time no more
    than 5% over the 12 kernels' (its header: 25.640 ms against 25.649 ms)."""
    g, cfg = golden(name)
    g12, _ = golden("llama70b_prefill_ops")
    assert g["mode"] == "timing" and g["lnc"] == cfg.lnc == 2
    device = round(g["device_time_ns"] * 1000)
    want = [("layer", *w[1:]) for w in llama_rows(2048, None)]
    assert [(r["kernel"], r["op"]) for r in g["ops"]] == [w[:2] for w in want]
    for row, (_k, _op, flops, read, written) in zip(g["ops"], want):
        assert_op_row(row, cfg, cfg.lnc, flops, read, written, device)
        assert row["fraction"] <= 1
    assert g["flops"] == g12["flops"] and g["hbm"]["bytes_read"] == g12["hbm"]["bytes_read"]
    assert g["hbm"]["bytes_written"] == g12["hbm"]["bytes_written"]
    assert g["device_time_ns"] <= 1.05 * g12["device_time_ns"]
    assert round(device / 1e7) == 2564
    launch = seconds_ps(cfg.host_link.launch_overhead)  # one launch
    assert round(g["total_time_ns"] * 1000) == device + launch


@by_name("llama70b_decode_ops")
def test_llama70b_decode_ops(name):
    """Each op row's FLOPs, bytes and bounds by hand (traces/llama70b_decode_ops.yaml); every
    op of a decode step is HBM-bound."""
    g, cfg, device = assert_llama_layer(name, 128, 2048)
    assert all(r["bound"] == "hbm" for r in g["ops"])
    weights = (2 * HID * HID + 2 * KVH * HD * HID + 3 * MLP * HID) * 2
    assert weights == 1_711_276_032  # the same layer as llama70b_layer_timing.yaml
    assert round(sum(r["roofline_ns"] for r in g["ops"]) / 1e3) == 3982  # the header's sum
    assert round(device / 1e7) == 517  # the header's 5.171 ms
