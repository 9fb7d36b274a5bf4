"""What once took the process down (SIGSEGV) with neuron tensors, run in a child process so that
a crash fails a test instead of pytest: ops whose results carry PyTorch's lazy conjugate or
negative bit (`x.conj()`, `torch.fft.hfft`, `ihfft`, ...), complex views, and native code that
reads a storage's pointer or allocates one (`byteswap`, `copy.deepcopy`). Each value is compared
with CPU's, bit for bit.

Also a script: `python tests/torch/test_crashes.py --sweep` runs every op_db entry that takes
complex64 (and every float32 one with `--float`) on neuron with plain, conjugate-bit and
negative-bit inputs, each entry in a forked child, and counts crashes (docs/torch.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _child(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """This file run as a script in a child (this checkout's trnsim)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, __file__, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _outcome(p: subprocess.CompletedProcess) -> str:
    return f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"


def test_conjugate_and_negative_bits_and_complex_views_match_cpu_in_a_child():
    p = _child("--cases")
    assert p.returncode == 0, _outcome(p)
    assert p.stdout.splitlines()[-1].startswith("ok "), _outcome(p)


def test_every_complex_op_db_entry_with_bits_runs_in_one_child():
    """The sweep's quick form: each complex64 entry's first samples with conjugate- and
    negative-bit inputs, all in one child (a crash names the entry it was in)."""
    pytest.importorskip("expecttest")  # torch.testing._internal needs it
    p = _child("--quick")
    assert p.returncode == 0, _outcome(p)
    assert p.stdout.splitlines()[-1].startswith("ok "), _outcome(p)


def test_a_storage_points_at_its_bytes_and_keeps_them():
    """data_ptr() is the host address of the block's bytes (native code may read it), the same
    as the CPU view's; the storage holds its block."""
    import trnsim.torch  # noqa: F401
    from trnsim.torch import tensors

    x = torch.arange(6.0).to("neuron")
    ptr = x.untyped_storage().data_ptr()
    blk = tensors.block_of(x)
    assert ptr == blk.address == blk.host_ptr == blk.base.data_ptr()
    assert tensors.cpu_view(x).untyped_storage().data_ptr() == ptr
    assert tensors._refs[ptr].block is blk


# -- the child's side ----------------------------------------------------------------------------


def _cases() -> dict:
    """name -> a function of the device ("cpu" or "neuron") giving CPU tensors (or values)."""
    import copy

    g = torch.Generator().manual_seed(0)
    real = torch.randn(4, 6, generator=g)
    cplx = torch.randn(4, 6, dtype=torch.complex64, generator=g)
    other = torch.randn(6, 3, dtype=torch.complex64, generator=g)

    def on(dev, t):
        return t.clone() if dev == "cpu" else t.to(dev)

    def back(r):
        if isinstance(r, torch.Tensor):
            return r.cpu()
        if isinstance(r, (list, tuple)):
            return type(r)(back(x) for x in r)
        return r

    cases = {}
    fft = ("hfft", "hfft2", "hfftn", "ifft", "ihfft", "ihfft2", "ihfftn", "ifft2", "irfft")
    for name in fft:
        for x, kind in ((real, "float32"), (cplx, "complex64")):
            if name.startswith("ihfft") and x.is_complex():
                continue  # real input only, as on CPU
            fn = getattr(torch.fft, name)
            cases[f"fft.{name}({kind})"] = lambda d, fn=fn, x=x: fn(on(d, x))

    def inplace_on_conj(d):
        y = on(d, cplx)
        y.conj()[1:].mul_(2j)
        return y

    def copy_into_conj(d):
        y = torch.zeros(4, 6, dtype=torch.complex64, device=d)
        y.conj().copy_(on(d, cplx))
        return y

    def byteswap(d):
        y = on(d, real)
        y.untyped_storage().byteswap(torch.float32)
        return y

    def storage_clone(d):
        st = on(d, real).untyped_storage().clone()
        return torch.tensor([], device=d).set_(st, 0, (4, 6), (6, 1))

    def deepcopy_module(d):
        torch.manual_seed(0)
        m = torch.nn.Linear(6, 3, dtype=torch.complex64).to(d)
        return copy.deepcopy(m)(on(d, cplx)).detach()

    cases |= {
        "conj().cpu()": lambda d: on(d, cplx).conj(),
        "conj().imag": lambda d: on(d, cplx).conj().imag,
        "conj().real": lambda d: on(d, cplx).conj().real,
        "_neg_view": lambda d: torch._neg_view(on(d, real)),
        "resolve_conj": lambda d: on(d, cplx).conj().resolve_conj(),
        "resolve_neg": lambda d: on(d, cplx).conj().imag.resolve_neg(),
        "conj_physical": lambda d: on(d, cplx).conj_physical(),
        "conj_physical_": lambda d: on(d, cplx).conj_physical_(),
        "conj() view [1:, ::2]": lambda d: on(d, cplx).conj()[1:, ::2],
        "conj().T": lambda d: on(d, cplx).conj().T,
        "conj().view(-1)": lambda d: on(d, cplx).conj().view(-1),
        "mH": lambda d: on(d, cplx).mH,
        "mm(conj, x)": lambda d: on(d, cplx).conj() @ on(d, other),
        "mm(neg view, x)": lambda d: torch._neg_view(on(d, cplx)) @ on(d, other),
        "vdot": lambda d: torch.vdot(on(d, cplx)[0], on(d, cplx)[1]),
        "dot(conj)": lambda d: torch.dot(on(d, cplx)[0].conj(), on(d, cplx)[1]),
        "conj() + 1": lambda d: on(d, cplx).conj() + 1,
        "view_as_real": lambda d: torch.view_as_real(on(d, cplx)),
        "view_as_complex": lambda d: torch.view_as_complex(on(d, real).view(4, 3, 2)),
        "view_as_real(conj resolved)": lambda d: torch.view_as_real(on(d, cplx).conj_physical()),
        "view(float32) of complex": lambda d: on(d, cplx).view(torch.float32),
        "in-place through a conj view": inplace_on_conj,
        "copy_ into a conj view": copy_into_conj,
        "conj().to(cpu, non_blocking)": lambda d: on(d, cplx).conj().to("cpu", non_blocking=True),
        "conj().tolist()": lambda d: on(d, cplx).conj().tolist(),
        "conj()[0, 0].item()": lambda d: on(d, cplx).conj()[0, 0].item(),
        "str(conj())": lambda d: str(on(d, cplx).conj()).replace(", device='neuron:0'", ""),
        "storage byteswap": byteswap,
        "storage clone": storage_clone,
        "deepcopy(tensor)": lambda d: copy.deepcopy(on(d, cplx).conj()),
        "deepcopy(module)": deepcopy_module,
    }
    return {name: (lambda d, fn=fn: back(fn(d))) for name, fn in cases.items()}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        a, b = a.resolve_conj().resolve_neg(), b.resolve_conj().resolve_neg()
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def run_cases() -> int:
    """Each case on CPU and on neuron; prints what differs, then `ok N`."""
    import trnsim.torch  # noqa: F401

    bad = 0
    cases = _cases()
    for name, fn in cases.items():
        print(f"--- {name}", file=sys.stderr, flush=True)  # a crash's last line names it
        want = fn("cpu")
        got = fn("neuron")
        if not _same(got, want):
            bad += 1
            print(f"DIFFERS {name}: neuron {got!r} cpu {want!r}")
    # an unresolved conjugate has no real view, on neuron as on CPU
    with pytest.raises(RuntimeError, match="conjugate"):
        torch.view_as_real(torch.ones(2, dtype=torch.complex64, device="neuron").conj())
    if bad:
        return 1
    print(f"ok {len(cases)} cases")
    return 0


# -- the sweep -----------------------------------------------------------------------------------

# values uninitialised: not compared
EMPTY = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"}


def _items(floats: bool) -> list[tuple[int, str, torch.dtype, str]]:
    """(op_db index, entry name, dtype, inputs): complex64 entries with plain, conjugate-bit and
    negative-bit inputs; with `floats` float32 entries plain and negative-bit too."""
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for i, op in enumerate(op_db):
        key = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        dts = op.supported_dtypes("cpu")
        if torch.complex64 in dts:
            out += [(i, key, torch.complex64, v) for v in ("plain", "conj", "neg")]
        if floats and torch.float32 in dts:
            out += [(i, key, torch.float32, v) for v in ("plain", "neg")]
    return out


def _bits(t, v: str, device: str | None):
    """Tensor `t`'s values as `v` inputs: conjugate or negative bit set, on `device`."""
    if not isinstance(t, torch.Tensor):
        return t
    move = (lambda y: y.to(device)) if device else (lambda y: y)
    if v == "conj" and t.is_complex():
        return move(t.conj_physical()).conj()
    if v == "neg" and (t.is_complex() or t.is_floating_point()):
        return torch._neg_view(move(-t))
    return move(t) if device else t.clone()


def run_item(op, dtype, v: str, samples: int = 12) -> dict:
    """An entry's first `samples` samples on CPU and neuron: counts of ok, mismatch, error (the
    device raised, CPU did not) and cpu_error, and the first problem."""
    from torch.utils._pytree import tree_flatten, tree_map

    counts = {"ok": 0, "mismatch": 0, "error": 0, "cpu_error": 0}
    first = None
    torch.manual_seed(0)
    start = time.time()
    for s in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples]:
        if time.time() - start > 40:
            break
        tree = (s.input, s.args, s.kwargs)
        ci, ca, ck = tree_map(lambda t: _bits(t, v, None), tree)
        di, da, dk = tree_map(lambda t: _bits(t, v, "neuron"), tree)
        try:
            torch.manual_seed(1)
            want = op(ci, *ca, **ck)
        except Exception:  # noqa: BLE001  (a sample CPU refuses)
            counts["cpu_error"] += 1
            continue
        try:
            torch.manual_seed(1)
            got = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t,
                           op(di, *da, **dk))  # fmt: skip
        except Exception as e:  # noqa: BLE001
            counts["error"] += 1
            first = first or f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"[:200]
            continue
        try:
            if op.name not in EMPTY:
                for g, w in zip(tree_flatten(got)[0], tree_flatten(want)[0]):
                    if isinstance(w, torch.Tensor):
                        g, w = g.resolve_conj().resolve_neg(), w.resolve_conj().resolve_neg()
                        torch.testing.assert_close(g, w, equal_nan=True)
            counts["ok"] += 1
        except Exception as e:  # noqa: BLE001
            counts["mismatch"] += 1
            first = first or f"mismatch: {(str(e).splitlines() or [''])[0]}"[:200]
    return {"counts": counts, "first": first}


def quick() -> int:
    """Every complex64 entry's first 2 samples with bits, in this process (module doc)."""
    import warnings

    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    import trnsim.torch  # noqa: F401

    torch.set_num_threads(1)
    items = [it for it in _items(floats=False) if it[3] != "plain"]
    for i, key, dtype, v in items:
        print(f"--- {key} {v}", file=sys.stderr, flush=True)
        try:
            run_item(op_db[i], dtype, v, samples=2)
        except Exception:  # noqa: BLE001, S112  (making the samples failed: not a crash)
            continue
    print(f"ok {len(items)} items")
    return 0


def sweep(floats: bool, out: str | None) -> int:
    """Each item in a forked child (a crash ends only it); prints counts, writes JSON lines."""
    import warnings

    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    import trnsim.torch  # noqa: F401

    torch.set_num_threads(1)
    items = _items(floats)
    log = open(out, "w") if out else None  # noqa: SIM115
    crashes, totals = [], {}
    for n, (i, key, dtype, v) in enumerate(items):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: run, answer, leave without cleanup
            os.close(rfd)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            try:
                res = run_item(op_db[i], dtype, v)
            except BaseException as e:  # noqa: BLE001
                res = {"harness": f"{type(e).__name__}: {e}"[:200]}
            os.write(wfd, json.dumps(res).encode())
            os._exit(0)
        os.close(wfd)
        deadline, status = time.time() + 120, None
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.time() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                status = "timeout"
            else:
                time.sleep(0.01)
        chunks = []
        while chunk := os.read(rfd, 1 << 16):
            chunks.append(chunk)
        os.close(rfd)
        rec = {"n": n, "entry": key, "dtype": str(dtype)[6:], "inputs": v}
        if chunks:
            rec |= json.loads(b"".join(chunks))
            for k, c in rec.get("counts", {}).items():
                totals[k] = totals.get(k, 0) + c
        elif status == "timeout":
            rec["timeout"] = True
        else:
            rec["crash"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else status >> 8
            crashes.append(rec)
            print(f"CRASH {key} {rec['dtype']} {v}: signal {rec['crash']}", flush=True)
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
    entries = len({it[1] for it in items})
    print(f"{len(items)} items ({entries} op_db entries), {len(crashes)} crashed; samples: "
          + ", ".join(f"{k} {c}" for k, c in totals.items()))  # fmt: skip
    return 1 if crashes else 0


if __name__ == "__main__":
    if "--cases" in sys.argv:
        sys.exit(run_cases())
    if "--quick" in sys.argv:
        sys.exit(quick())
    if "--sweep" in sys.argv:
        out = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--out=")), None)
        sys.exit(sweep("--float" in sys.argv, out))
    sys.exit(f"usage: {sys.argv[0]} --cases | --quick | --sweep [--float] [--out=FILE]")
