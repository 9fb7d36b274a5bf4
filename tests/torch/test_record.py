"""Record and replay (docs/torch.md): a run on the `neuron` device written as a trace with
`trnsim.torch.record`, replayed by `trnsim run` without PyTorch, reports what the recorded run
measured: the same FLOPs and bytes, the same time between its events on the recorded chip
(within 1%), a what-if on another; with values, the same outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import trnsim.torch  # noqa: F401
from trnsim.cli.app import main
from trnsim.config import load_chip
from trnsim.runtime.estimate import estimate_ps
from trnsim.trace import load


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)
    ).to("neuron")


def _replay(path, *args) -> dict:
    res = CliRunner().invoke(main, ["run", str(path), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _two_streams(path, suffix=".yaml"):
    """MLP forward and backward on the default stream, an estimated op (cumsum) on a second
    stream, joined by an event; the time measured by torch.neuron Events."""
    model = _mlp()
    x = torch.randn(16, 64)
    side = torch.neuron.Stream()
    with trnsim.torch.record(path, names=dict(model.named_parameters())) as rec:
        start = torch.neuron.Event(enable_timing=True)
        end = torch.neuron.Event(enable_timing=True)
        ready = torch.neuron.Event()
        xd = x.to("neuron")  # a host copy: before the timed region (see the total below)
        start.record()
        with torch.neuron.stream(side):
            z = (xd * 2).cumsum(1)
            ready.record()
        loss = model(xd).square().mean()
        loss.backward()
        torch.neuron.current_stream().wait_event(ready)
        out = loss + z.sum()
        end.record()
        out.item()
    return rec, start.elapsed_time(end) * 1e6  # ns


def test_replay_reports_what_the_recorded_run_measured(tmp_path):
    rec, torch_ns = _two_streams(tmp_path / "run.yaml")
    s = rec.summary
    assert s["estimated"]["launches"] == 2  # cumsum, and backward's fill_ of the seed grad
    prog = load(tmp_path / "run.yaml")
    assert [st.name for st in prog.streams] == ["default", "stream" + prog.streams[1].name[6:]]
    assert {st.stream for st in prog.streams[0].steps} == {None, prog.streams[1].name}
    assert sum(1 for k in prog.kernels.values() if k.estimate) == 2
    assert "t_0_weight" in prog.tensors and prog.tensors["t_0_weight"].strides == (64, 1)

    r = _replay(tmp_path / "run.yaml")
    assert r["flops"] == s["flops"] > 2 * 16 * 64 * 128 * 3  # forward + backward matmuls
    assert r["hbm"]["bytes_read"] + r["hbm"]["bytes_written"] == s["bytes"]
    assert r["estimated"]["flops"] == s["estimated"]["flops"] == 16 * 64 + 1
    # cumsum reads and writes; the fill_ writes its 0-dim tensor without reading it
    assert r["estimated"]["bytes"] == s["estimated"]["bytes"] == 2 * 16 * 64 * 4 + 4
    ((name, t),) = r["timings"].items()
    assert t["ns"] == pytest.approx(torch_ns, rel=0.01)
    # host copies cost the host a copy call both ways (`copy_overhead`)
    assert r["total_time_ns"] * 1000 == pytest.approx(s["time_ps"], rel=0.01)

    trn3 = _replay(tmp_path / "run.yaml", "--chip", "trn3")
    assert trn3["chip"] == "trn3" and trn3["timings"][name]["ns"] > 0
    cfg = load_chip("trn3")
    est = sum(estimate_ps(cfg, trn3["lnc"], k.estimate.flops, k.estimate.bytes, "float32")
              for k in prog.kernels.values() if k.estimate)  # fmt: skip
    assert trn3["estimated"]["time_ns"] == pytest.approx(est / 1000)


def test_json_recording_replays_the_same(tmp_path):
    rec, torch_ns = _two_streams(tmp_path / "run.json")
    text = (tmp_path / "run.json").read_text()
    assert text.startswith("{")
    r = _replay(tmp_path / "run.json")
    assert r["flops"] == rec.summary["flops"]
    assert next(iter(r["timings"].values()))["ns"] == pytest.approx(torch_ns, rel=0.01)


def test_values_replay_reproduces_outputs(tmp_path):
    model = _mlp()
    x = torch.randn(16, 64)
    with trnsim.torch.record(tmp_path / "run.yaml", values=True) as rec:
        loss = model(x.to("neuron")).square().mean()
        loss.backward()
        rec.output("loss", loss)
        rec.output("grad_w0", model[0].weight.grad)
        rec.output("grad_b2", model[2].bias.grad)
    files = sorted(p.name for p in (tmp_path / "run_values").iterdir())
    assert files and all(f.endswith(".npy") for f in files)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["run", str(tmp_path / "run.yaml"), "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    for name, want in (("loss", loss), ("grad_w0", model[0].weight.grad),
                       ("grad_b2", model[2].bias.grad)):  # fmt: skip
        got = np.load(out / f"{name}.npy").reshape(tuple(want.shape))
        np.testing.assert_allclose(got, want.detach().cpu().numpy(), rtol=2e-3, atol=1e-6)
    r = _replay(tmp_path / "run.yaml", "--check")
    assert r["check"] and all(c["ok"] for c in r["check"].values()), r["check"]


def test_a_trailing_broadcast_writes_its_result_in_place(tmp_path):
    """x [2, 4, 6] + y [4, 6] is the library's row broadcast of [2, 24] views (`aten.
    _trailing`): the op's out is a view of the result's memory, so the replay computes z
    (no `writes:` file for it, no tensor of its own) and --check holds."""
    x, y = torch.randn(2, 4, 6), torch.randn(4, 6)
    with trnsim.torch.record(tmp_path / "run.yaml", values=True) as rec:
        z = x.to("neuron") + y.to("neuron")
        rec.output("z", z)
    doc = (tmp_path / "run.yaml").read_text()
    assert "writes:" not in doc and "- {add: " in doc, doc
    prog = load(tmp_path / "run.yaml")
    (kernel,) = prog.kernels.values()
    out = prog.tensors[kernel.ops[0].args["out"]]
    assert list(out.shape) == [2, 24] and out.view == prog.tensors["z"].view
    res = CliRunner().invoke(main, ["run", str(tmp_path / "run.yaml"), "--out-dir",
                                    str(tmp_path / "out")])  # fmt: skip
    assert res.exit_code == 0, res.output
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "z.npy").reshape(2, 4, 6), x + y)
    r = _replay(tmp_path / "run.yaml", "--check")
    assert all(c["ok"] for c in r["check"].values()), r["check"]


def test_a_rotary_table_times_a_transposed_q_replays_on_its_strided_view(tmp_path):
    """q [2, 40, 3, 16].transpose(1, 2) * cos [40, 16] is the library's table broadcast
    (`kernels.broadcast_table`) on q's strided view: the replay computes z and --check holds."""
    q, c = torch.randn(2, 40, 3, 16), torch.randn(40, 16)
    with trnsim.torch.record(tmp_path / "run.yaml", values=True) as rec:
        z = q.to("neuron").transpose(1, 2) * c.to("neuron")
        rec.output("z", z)
    assert "- {mul: " in (tmp_path / "run.yaml").read_text()
    res = CliRunner().invoke(main, ["run", str(tmp_path / "run.yaml"), "--out-dir",
                                    str(tmp_path / "out")])  # fmt: skip
    assert res.exit_code == 0, res.output
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "z.npy"), q.transpose(1, 2) * c)
    r = _replay(tmp_path / "run.yaml", "--check")
    assert all(c["ok"] for c in r["check"].values()), r["check"]


def test_a_broadcast_per_batch_item_writes_each_item_in_place(tmp_path):
    """x [2, 3, 4, 5] + mask [2, 1, 1, 5] is one library op per batch item (`aten._per_item`)
    on views of the result's memory at each item's offset: the replay computes z."""
    x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 1, 1, 5)
    with trnsim.torch.record(tmp_path / "run.yaml", values=True) as rec:
        z = x.to("neuron") + y.to("neuron")
        rec.output("z", z)
    prog = load(tmp_path / "run.yaml")
    (kernel,) = prog.kernels.values()
    outs = [prog.tensors[op.args["out"]] for op in kernel.ops]
    assert [o.offset for o in outs] == [0, 3 * 4 * 5] and {o.view for o in outs} == {
        prog.tensors["z"].view
    }
    res = CliRunner().invoke(main, ["run", str(tmp_path / "run.yaml"), "--out-dir",
                                    str(tmp_path / "out")])  # fmt: skip
    assert res.exit_code == 0, res.output
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "z.npy").reshape(2, 3, 4, 5), x + y)


def test_without_values_no_files_and_timing_mode(tmp_path):
    model = _mlp()
    x = torch.randn(16, 64).to("neuron")
    with trnsim.torch.record(tmp_path / "r.yaml"):
        model(x).relu_()
    assert not (tmp_path / "r_values").exists()
    prog = load(tmp_path / "r.yaml")
    assert prog.mode == "timing" and prog.chip == "trn2"
    assert all(t.init is None for t in prog.tensors.values())


def test_nested_recordings_are_refused(tmp_path):
    with trnsim.torch.record(tmp_path / "a.yaml"):
        with pytest.raises(RuntimeError, match="already in progress"):
            with trnsim.torch.record(tmp_path / "b.yaml"):
                pass


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.ln = torch.nn.Embedding(100, 64), torch.nn.LayerNorm(64)
        self.fc = torch.nn.Linear(64, 100)

    def forward(self, ids):
        return self.fc(torch.nn.functional.gelu(self.ln(self.emb(ids))))


def test_training_steps_replay_with_their_values(tmp_path):
    """Two AdamW steps (embedding, layer_norm, gelu, cross_entropy; foreach updates): the
    replay's weights and loss are PyTorch's, each op within its check's tolerance, and its
    figures and event time the recorded run's."""
    torch.manual_seed(0)
    m = _Tiny().to("neuron")
    opt = torch.optim.AdamW(m.parameters())
    ids, tgt = torch.randint(0, 100, (32,)), torch.randint(0, 100, (32,))
    i, t = ids.to("neuron"), tgt.to("neuron")
    with trnsim.torch.record(tmp_path / "train.yaml", values=True) as rec:
        start, end = (torch.neuron.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(m(i), t)
            loss.backward()
            opt.step()
            opt.zero_grad()
        end.record()
        rec.output("w", m.fc.weight)
        rec.output("loss", loss)
        loss.item()
    s = rec.summary
    assert s["estimated"]["launches"] > 0 and s["modelled"] > 30
    r = _replay(tmp_path / "train.yaml", "--check", "--out-dir", str(tmp_path / "out"))
    assert r["flops"] == s["flops"]
    assert r["hbm"]["bytes_read"] + r["hbm"]["bytes_written"] == s["bytes"]
    ns = start.elapsed_time(end) * 1e6
    assert next(iter(r["timings"].values()))["ns"] == pytest.approx(ns, rel=0.01)
    assert r["check"] and all(c["ok"] for c in r["check"].values())
    w = np.load(tmp_path / "out" / "w.npy")
    np.testing.assert_allclose(w, m.fc.weight.detach().cpu().numpy(), atol=1e-5)
    got = np.load(tmp_path / "out" / "loss.npy")[0]
    assert got == pytest.approx(loss.item(), rel=1e-4)
