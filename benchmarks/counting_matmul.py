"""A tiled matmul written the way the hardware's semaphores are used: one counting semaphore per
engine and DMA queue, counts that climb for the whole kernel.

    python benchmarks/counting_matmul.py --out /tmp/cm.json            # 99,328 instructions
    python benchmarks/counting_matmul.py --mt 2 --nt 2 --out /tmp/s.yaml   # a small one
    trnsim run /tmp/cm.json

C [M, N] = A [M, K] @ B [K, N] in bf16 on one trn1 NeuronCore (timing mode), A given transposed
(aT [K, M], K on the partitions, as TensorE wants its stationary operand). Output tiles (mi, ni)
of [128, 512], each accumulating KT K-tiles of 128 in a PSUM bank; step i of the flattened
(tile, k) loop uses SBUF buffers a<j>, b<j> with j = i % NBUF:

    load  aT[k, mi] -> a<j>   queue 0   wait {q0: i-NBUF+1, tensor: i-NBUF+1}   signal {q0: 1}
    load  B[k, ni]  -> b<j>   queue 1   wait {q1: i-NBUF+1, tensor: i-NBUF+1}   signal {q1: 1}
    matmul a<j>, b<j> -> acc<t%2>       wait {q0: i+1, q1: i+1} (+ {act: t-1})  signal {tensor: 1}
  after a tile's last K-step:
    activation acc<t%2> -> o<t%2>       wait {tensor: (t+1)*KT, q2: t-1}          signal {act: 1}
    store o<t%2> -> C[mi, ni] queue 2   wait {act: t+1}                          signal {q2: 1}

A load waits until the matmul that last read its buffer is done (`tensor`), and until its own
queue is at most NBUF-1 transfers ahead (`q0`); a matmul waits for the counts of both load
queues. `q0 >= i+1` says that the first i+1 transfers of queue 0 are complete only because a DMA
queue completes its transfers (of one direction) in order: the race check relies on it
(docs/races.md). With the defaults (mt=16, nt=32, kt=64: 512 tiles) the counts climb to 32,768
and the kernel has 99,328 instructions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NBUF = 4  # rotating SBUF buffers per operand


def document(mt: int = 16, nt: int = 32, kt: int = 64, chip: str = "trn1") -> dict:
    """The trace as plain data: mt x nt output tiles of [128, 512], kt K-tiles each."""
    instructions: list[dict] = []
    i = 0
    for t in range(mt * nt):
        mi, ni = divmod(t, nt)
        for k in range(kt):
            j = i % NBUF
            rows = f"{k * 128}:{(k + 1) * 128}"
            for q, src, dst in (
                (0, f"aT[{rows}, {mi * 128}:{(mi + 1) * 128}]", f"a{j}"),
                (1, f"b[{rows}, {ni * 512}:{(ni + 1) * 512}]", f"b{j}"),
            ):
                load = {"op": "dma_copy", "queue": q, "src": src, "dst": dst}
                if i >= NBUF:
                    load["wait"] = {f"q{q}": i - NBUF + 1, "tensor": i - NBUF + 1}
                load["signal"] = {f"q{q}": 1}
                instructions.append(load)
            wait = {"q0": i + 1, "q1": i + 1}
            if k == 0 and t >= 2:
                wait["act"] = t - 1  # acc<t%2> read out by the activation of tile t-2
            instructions.append(
                {
                    "op": "matmul",
                    "stationary": f"a{j}",
                    "moving": f"b{j}",
                    "dst": f"acc{t % 2}",
                    "accumulate": k > 0,
                    "wait": wait,
                    "signal": {"tensor": 1},
                }
            )
            i += 1
        wait = {"tensor": (t + 1) * kt}
        if t >= 2:
            wait["q2"] = t - 1  # o<t%2> stored by tile t-2's store
        instructions += [
            {
                "op": "activation",
                "func": "copy",
                "src": f"acc{t % 2}",
                "dst": f"o{t % 2}",
                "wait": wait,
                "signal": {"act": 1},
            },
            {
                "op": "dma_copy",
                "queue": 2,
                "src": f"o{t % 2}",
                "dst": f"c[{mi * 128}:{(mi + 1) * 128}, {ni * 512}:{(ni + 1) * 512}]",
                "wait": {"act": t + 1},
                "signal": {"q2": 1},
            },
        ]
    tiles = {}
    for j in range(NBUF):
        tiles[f"a{j}"] = {"memory": "sbuf", "shape": [128, 128], "dtype": "bfloat16"}
        tiles[f"b{j}"] = {"memory": "sbuf", "shape": [128, 512], "dtype": "bfloat16"}
    for j in range(2):
        tiles[f"acc{j}"] = {"memory": "psum", "shape": [128, 512], "dtype": "float32"}
        tiles[f"o{j}"] = {"memory": "sbuf", "shape": [128, 512], "dtype": "bfloat16"}
    return {
        "trnsim": 1,
        "name": "counting-matmul",
        "chip": chip,
        "mode": "timing",
        "tensors": {
            "aT": {"shape": [kt * 128, mt * 128], "dtype": "bfloat16"},
            "b": {"shape": [kt * 128, nt * 512], "dtype": "bfloat16"},
            "c": {"shape": [mt * 128, nt * 512], "dtype": "bfloat16"},
        },
        "tiles": tiles,
        "instructions": instructions,
    }


def write(doc: dict, path: Path) -> None:
    """JSON for a .json path, else YAML (one flow mapping per instruction)."""
    if path.suffix == ".json":
        path.write_text(json.dumps(doc))
        return
    import yaml

    head = {k: v for k, v in doc.items() if k != "instructions"}
    lines = [yaml.safe_dump(head, sort_keys=False, default_flow_style=None).rstrip()]
    lines.append("instructions:")
    lines += [f"  - {json.dumps(ins)}" for ins in doc["instructions"]]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mt", type=int, default=16, help="output tiles of 128 rows (default 16)")
    ap.add_argument("--nt", type=int, default=32, help="output tiles of 512 columns (default 32)")
    ap.add_argument("--kt", type=int, default=64, help="K-tiles of 128 (default 64)")
    ap.add_argument("--chip", default="trn1")
    ap.add_argument("--out", type=Path, required=True, help="the trace to write (.json or .yaml)")
    args = ap.parse_args()
    doc = document(args.mt, args.nt, args.kt, args.chip)
    write(doc, args.out)
    print(f"{args.out}: {len(doc['instructions'])} instructions")


if __name__ == "__main__":
    main()
