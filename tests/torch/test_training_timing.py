"""A training step on `neuron` is timed by the kernel library: forward, backward (the
elementwise backward ops, softmax and layer_norm backward, embedding backward, the loss's
log_softmax + nll_loss pair) and AdamW's `_foreach_*` ops, each at least its roofline."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import trnsim.torch  # noqa: E402,F401
from trnsim.torch import timing  # noqa: E402
from trnsim.torch.listeners import Listener  # noqa: E402
from trnsim.torch.measure import op_key  # noqa: E402

VOCAB, WIDTH, TOKENS = 96, 64, 256


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.norm = nn.LayerNorm(2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, VOCAB)

    def forward(self, ids):
        h = self.norm(F.gelu(self.up(self.emb(ids))))
        h = torch.sigmoid(h) * torch.tanh(h) + F.silu(h) + torch.relu(h)
        return self.down(h)


def _steps(device, ids, target, n=2):
    torch.manual_seed(0)
    model = Net().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    for _ in range(n):
        opt.zero_grad()
        logits = model(ids.to(device))
        loss = F.cross_entropy(logits, target.to(device))
        loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()], loss.item()


@pytest.fixture(scope="module")
def step():
    """The per-op statistics and the roofline of each op (from its first launch's tensors)
    of two training steps; the parameters on neuron and on CPU."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    target = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    t = timing.timer()
    roof = {}

    class Spy(Listener):
        def op(self, run):
            args, kwargs, r = run.args, run.kwargs, run.result
            est = t.measure.estimate(run.name, args, kwargs, r).duration_ps
            roof.setdefault(run.name, (est, _written(r, args)))

    before = {k: (s.count, s.device_ps, s.modelled) for k, s in t.stats.items()}
    spy = Spy()
    t.listeners.add(spy)
    try:
        got, loss = _steps("neuron", ids, target)
    finally:
        t.listeners.remove(spy)
    stats = {}
    for k, s in t.stats.items():
        c0, d0, m0 = before.get(k, (0, 0, 0))
        if s.count > c0:
            stats[k] = (s.count - c0, s.device_ps - d0, s.modelled - m0)
    return stats, roof, got, loss, _steps("cpu", ids, target)


def _written(r, args) -> int:
    outs = r if isinstance(r, (list, tuple)) else [r] if r is not None else args[0]
    return sum(x.numel() * x.element_size() for x in outs if isinstance(x, torch.Tensor))


MODELLED = [
    "index_select.default",  # the embedding lookup
    "addmm.default", "mm.default", "gelu.default", "native_layer_norm.default",
    "sigmoid.default", "tanh.default", "silu.default", "relu.default",
    "_log_softmax.default", "nll_loss_forward.default",
    "nll_loss_backward.default", "_log_softmax_backward_data.default",
    "sum.dim_IntList",  # the bias gradients
    "threshold_backward.default", "gelu_backward.default", "silu_backward.default",
    "sigmoid_backward.default", "tanh_backward.default", "native_layer_norm_backward.default",
    "embedding_dense_backward.default",
    "_foreach_lerp_.Scalar", "_foreach_mul_.Scalar", "_foreach_addcmul_.Scalar",
    "_foreach_sqrt.default", "_foreach_div_.ScalarList", "_foreach_add_.Scalar",
    "_foreach_addcdiv_.ScalarList",
]  # fmt: skip
# ops whose roofline estimate counts bytes the library rightly does not move: a gather reads
# the table's rows it needs, not the table; nll_loss reads one element per row; its backward
# reads the input's shape only
GATHERS = {"index_select.default", "nll_loss_forward.default", "nll_loss_backward.default"}


def test_the_step_matches_cpu(step):
    _, _, got, loss, (want, want_loss) = step
    assert loss == want_loss
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("name", MODELLED)
def test_the_training_step_ops_are_modelled_at_or_above_their_roofline(step, name):
    stats, roof, *_ = step
    count, device_ps, modelled = stats[name]
    assert modelled == count, f"{name}: {timing.timer().refused.get(name)}"
    per_launch = device_ps / count
    estimate, written = roof[name]
    bw = timing.timer().measure.hbm_bw
    assert per_launch >= written / bw * 1e12 > 0  # at least its writes through HBM
    if name not in GATHERS:
        assert per_launch >= estimate > 0


def test_a_refused_shape_falls_back_to_the_estimate_with_the_reason():
    x = torch.randn(4, 5, 6, device="neuron")
    x.sum(dim=1) + x.amax(dim=1)  # modelled: reductions over a middle dim
    t = timing.timer()
    assert t.stats["sum.dim_IntList"].modelled and t.stats["amax.default"].modelled
    y = torch.randn(8, 6, 7, device="neuron")
    y + torch.randn(6, 1, device="neuron")  # a column of a middle dim: not lowered
    assert t.stats["add.Tensor"].estimated >= 1
    assert "this broadcast is not lowered yet" in t.refused["add.Tensor"]


OTHERS = {  # aten op -> code that issues it on neuron tensors x [64, 48], y [64, 48], m (bool)
    "argmax.default": lambda x, y, m: x.argmax(dim=0),
    "cat.default": lambda x, y, m: torch.cat([x, y, x], dim=1),
    "sum.dim_IntList": lambda x, y, m: x.view(4, 16, 48).sum(dim=(0, 2)),
    "mean.dim": lambda x, y, m: x.mean(),
    "where.self": lambda x, y, m: torch.where(m, x, 0.0),
    "masked_fill_.Scalar": lambda x, y, m: x.masked_fill(m, -1.0),
    "addmm.default": lambda x, y, m: torch.addmm(y, x, torch.eye(48, device=x.device), beta=0.5),
    "lerp.Scalar": lambda x, y, m: torch.lerp(x, y, 0.3),
    "addcdiv.default": lambda x, y, m: torch.addcdiv(x, x, y.exp(), value=0.1),
    "mul.Tensor": lambda x, y, m: 2.0 * x,
    # a tensor of the trailing dims over the leading ones: GPT-2's wte(ids) + wpe(pos), a
    # rotary table times [B, H, T, hd], a mask added to attention's scores (were estimated)
    "add.Tensor": lambda x, y, m: x.view(4, 16, 48) + y[:16],
    "sub.Tensor": lambda x, y, m: y[:16] - x.view(1, 4, 16, 48),
    "add_.Tensor": lambda x, y, m: x.view(2, 2, 16, 48).add_(y[16:32]),
    # a [B, 1, 1, T] padding mask over [B, H, T, T] scores (BERT): an op per batch item
    "div.Tensor": lambda x, y, m: x.view(4, 2, 8, 48) / y[:4].view(4, 1, 1, 48).exp(),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_more_ops_are_modelled_and_match_cpu(name):
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(64, 48, generator=gen), torch.randn(64, 48, generator=gen)
    m = torch.rand(64, 48, generator=gen) > 0.5
    t = timing.timer()
    before = t.stats[name].modelled if name in t.stats else 0
    got = OTHERS[name](x.to("neuron"), y.to("neuron"), m.to("neuron"))
    torch.testing.assert_close(got.cpu(), OTHERS[name](x, y, m), rtol=0, atol=0)
    assert t.stats[name].modelled == before + 1, t.refused.get(name)


@pytest.mark.parametrize("table", [(40, 16), (1, 1, 40, 16), (2, 1, 40, 16)])
def test_a_rotary_table_times_a_transposed_q_is_modelled_and_matches_cpu(table):
    """Llama's rotary embedding: q [B, T, H, hd] after transpose(1, 2) (a strided view, not
    the row broadcast of [rows, T x hd] views) times cos [T, hd] (Hugging Face's [B, 1, T,
    hd]), plus the rotated halves times sin: the library's table broadcast
    (`kernels.broadcast_table`); mul.Tensor was refused and estimated."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 40, 3, 16, generator=gen)
    cos, sin = torch.randn(table, generator=gen), torch.randn(table, generator=gen)

    def rope(q, cos, sin):
        x = q.transpose(1, 2)
        rot = torch.cat([-x[..., 8:], x[..., :8]], -1)
        return x * cos + rot * sin

    t = timing.timer()
    before = t.stats["mul.Tensor"].modelled if "mul.Tensor" in t.stats else 0
    got = rope(q.to("neuron"), cos.to("neuron"), sin.to("neuron"))
    torch.testing.assert_close(got.cpu(), rope(q, cos, sin), rtol=0, atol=0)
    assert t.stats["mul.Tensor"].modelled == before + 2, t.refused.get("mul.Tensor")


def test_a_strided_view_is_timed_apart_from_a_contiguous_tensor_of_its_shape():
    """The timer keeps one measurement per signature: a transposed q ([B, H, T, hd] view of
    [B, T, H, hd]) times a table lowers otherwise than a contiguous q of the same shape, so its
    strides are part of the signature; they were not, and whichever came first set both
    times (a transposed q after a contiguous one took the contiguous one's)."""
    gen = torch.Generator().manual_seed(4)
    cos = torch.randn(64, 32, generator=gen).to("neuron")
    q = torch.randn(1, 64, 8, 32, generator=gen).to("neuron").transpose(1, 2)
    t = timing.timer()

    def timed(x) -> int:
        x * cos
        return t.measure.memo[op_key("mul.Tensor", (x, cos), {})].duration_ps

    t.measure.memo.clear()
    contiguous = timed(q.contiguous())
    strided = timed(q)
    t.measure.memo.clear()
    assert timed(q) == strided != contiguous


def test_a_permuted_view_made_contiguous_is_the_librarys_permute():
    x = torch.randn(4, 32, 8, 16, device="neuron")
    t = timing.timer()
    before = t.copies.modelled
    y = x.permute(0, 2, 1, 3).contiguous()
    assert t.copies.modelled == before + 1
    assert torch.equal(y.cpu(), x.cpu().permute(0, 2, 1, 3).contiguous())
