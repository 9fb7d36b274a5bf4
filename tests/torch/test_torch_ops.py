"""Ops on `neuron` against the same ops on CPU: the kernel library's op list, indexing, cat,
where, masked_fill, cumsum, sort, topk, dropout, embedding, over several shapes and dtypes; a
TransformerEncoderLayer forward and backward."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import trnsim.torch  # noqa: E402,F401

SHAPES = [(7,), (4, 33), (2, 3, 130)]
FLOATS = [torch.float32, torch.bfloat16]

UNARY = [
    torch.exp, torch.log, torch.tanh, torch.sigmoid, torch.relu, F.gelu,
    lambda x: F.gelu(x, approximate="tanh"), F.silu, torch.sqrt, torch.rsqrt, torch.square,
    torch.abs, torch.reciprocal, torch.sin, torch.cos, torch.erf, torch.neg, torch.clone,
]  # fmt: skip
BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.pow]


def _same(f, *xs):
    """f on neuron equals f on CPU (bit for bit: the same CPU kernels compute both)."""
    want = f(*xs)
    got = f(*[x.to("neuron") if isinstance(x, torch.Tensor) else x for x in xs])
    if isinstance(want, torch.Tensor):
        want, got = (want,), (got,)
    for w, g in zip(want, got):
        assert g.device.type == "neuron"
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_elementwise_ops(shape, dtype):
    torch.manual_seed(0)
    x = torch.rand(shape, dtype=dtype) + 0.5
    y = torch.randn(shape, dtype=dtype)
    for f in UNARY:
        _same(f, x)
    for f in BINARY:
        _same(f, x, y.abs() + 0.5)
        if f not in (torch.maximum, torch.minimum):
            _same(f, x, 2.0)
    _same(lambda a, b: a + b, x, y[..., :1])  # a column broadcast
    _same(lambda a, b: a * b, x, y[-1:] if len(shape) > 1 else y)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_rows_and_norms(shape, dtype):
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=dtype)
    d = shape[-1]
    w, b = torch.randn(d, dtype=dtype), torch.randn(d, dtype=dtype)
    for f in (
        lambda t: torch.softmax(t, -1), lambda t: torch.log_softmax(t, -1),
        lambda t: t.sum(-1), lambda t: t.mean(-1, keepdim=True), lambda t: t.amax(-1),
        lambda t: t.amin(-1), lambda t: torch.softmax(t, 0), lambda t: t.sum(),
    ):  # fmt: skip
        _same(f, x)
    _same(lambda t, w, b: F.layer_norm(t, (d,), w, b), x, w, b)
    _same(lambda t, w: F.rms_norm(t, (d,), w), x, w)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmuls_and_linear(dtype):
    torch.manual_seed(2)
    a, b = torch.randn(3, 20, 48, dtype=dtype), torch.randn(3, 48, 24, dtype=dtype)
    w, bias = torch.randn(24, 48, dtype=dtype), torch.randn(24, dtype=dtype)
    _same(torch.matmul, a, b)
    _same(torch.mm, a[0], b[0])
    _same(torch.bmm, a, b)
    _same(F.linear, a, w, bias)
    _same(lambda t: t.transpose(-1, -2).contiguous(), a)
    q = torch.randn(2, 4, 16, 8, dtype=dtype)
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    got = F.scaled_dot_product_attention(*(q.to("neuron"),) * 3, is_causal=True)
    assert torch.allclose(got.cpu(), want, atol=1e-2 if dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_indexing_and_selection(dtype):
    torch.manual_seed(3)
    x = (torch.randn(6, 9) * 10).to(dtype)
    idx = torch.tensor([4, 0, 2])
    mask = torch.randn(6, 9) > 0
    _same(lambda t: t[1:5:2, ::3], x)
    _same(lambda t, i: t[i], x, idx)
    _same(lambda t, i: t[:, i], x, idx)
    _same(lambda t, m: t[m], x, mask)
    _same(lambda t, i: t.index_select(1, i), x, idx)
    _same(lambda t, i: torch.gather(t, 1, i.expand(6, 3)), x, idx)
    _same(lambda t: torch.cat([t, t[:2]], 0), x)
    _same(lambda t: torch.stack([t, t], 1), x)
    _same(lambda m, t: torch.where(m, t, t * 2), mask, x)
    _same(lambda t, m: t.masked_fill(m, 7), x, mask)
    _same(lambda t: torch.cumsum(t, 1), x)
    _same(lambda t: torch.sort(t, 1), x)
    _same(lambda t: torch.topk(t, 3, 1), x)
    _same(lambda t: t.argmax(1), x)
    _same(lambda t: torch.nonzero(t > 0), x)

    def put(t, i):
        t = t.clone()
        t[i] = 5
        return t

    _same(put, x, idx)


def test_dropout_embedding_and_cross_entropy():
    torch.manual_seed(4)
    x = torch.randn(8, 16)
    torch.manual_seed(9)
    want = F.dropout(x, 0.3)
    torch.manual_seed(9)
    got = F.dropout(x.to("neuron"), 0.3)
    assert torch.equal(got.cpu(), want)
    emb = torch.randn(50, 12)
    ids = torch.tensor([[1, 4, 49], [0, 0, 7]])
    _same(F.embedding, ids, emb)
    logits, target = torch.randn(6, 10), torch.tensor([1, 0, 9, 3, 3, 2])
    _same(F.cross_entropy, logits, target)


def test_transformer_encoder_layer_forward_and_backward_match_cpu():
    torch.manual_seed(5)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 10, 32)
    with sdpa_kernel(SDPBackend.MATH):
        y = layer(x)
        y.square().mean().backward()
    grads = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    dev = layer.to("neuron")
    yn = dev(x.to("neuron"))
    yn.square().mean().backward()
    assert torch.allclose(yn.cpu(), y, atol=1e-5)
    for p, g in zip(dev.parameters(), grads):
        assert torch.allclose(p.grad.cpu(), g, atol=1e-5)


def test_autocast_runs_matmuls_in_bfloat16_and_softmax_in_float32():
    torch.manual_seed(6)
    a, w = torch.randn(16, 32), torch.randn(8, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want_lin = F.linear(a, w)
        want_mm = a @ a.t()
    want = torch.softmax(want_lin.float(), -1)  # CUDA's rule (CPU autocast keeps bf16 here)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        mm = a.to("neuron") @ a.to("neuron").t()
        lin = F.linear(a.to("neuron"), w.to("neuron"))
        got = torch.softmax(lin, -1)
    assert mm.dtype == lin.dtype == torch.bfloat16 and got.dtype == torch.float32
    assert torch.equal(mm.cpu(), want_mm)
    assert torch.equal(lin.cpu(), want_lin)
    assert torch.equal(got.cpu(), want)
    stats = trnsim.torch.timing.timer().stats
    assert stats["mm.default"].modelled >= 1  # timed by the library, in bfloat16


def test_convolution_forward_and_backward_match_cpu():
    """Convolutions reach a device defined outside PyTorch as convolution_overrideable."""
    torch.manual_seed(7)
    conv = nn.Conv2d(3, 4, 3, padding=1, groups=1)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    y_cpu = conv(x)
    y_cpu.square().sum().backward()
    want = [conv.weight.grad.clone(), conv.bias.grad.clone(), x.grad.clone()]
    dev = conv.to("neuron")
    dev.zero_grad()
    xn = x.detach().to("neuron").requires_grad_()
    y = dev(xn)
    y.square().sum().backward()
    assert torch.equal(y.detach().cpu(), y_cpu.detach())
    for g, w in zip([dev.weight.grad, dev.bias.grad, xn.grad], want):
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
    _same(lambda t: t * 1j, torch.ones(3, dtype=torch.complex64))  # a complex scalar
