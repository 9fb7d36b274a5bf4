"""The fused LSTM and GRU cells that `nn.LSTM`, `nn.GRU` and `nn.LSTMCell` call on an
accelerator (`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell` and their backwards).

PyTorch's CPU runs the cells unfused (a matmul, then elementwise ops); on any other device it
calls these ops, which have CUDA kernels only. Here they are the same elementwise math as
PyTorch's CUDA kernels (aten/src/ATen/native/cuda/RNN.cu), in CPU ops on the device's values:
the results differ from CPU's unfused cell by float rounding (about 1e-6), not in meaning. The
workspaces hold what the CUDA kernels keep for the backward: the four activated LSTM gates;
the GRU's r, z, n, h and its hidden candidate.
"""

from __future__ import annotations

import torch

from trnsim.torch.tensors import cpu_view, to_device
from trnsim.torch.timing import record as timing_record

__all__ = ["KERNELS"]


def _cpu(*ts):
    return [None if t is None else cpu_view(t) for t in ts]


def _out(name: str, args: list, results: tuple) -> tuple:
    timing_record(name, args, {}, results)
    return tuple(None if r is None else to_device(r.contiguous()) for r in results)


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    ig, hg, c, ib, hb = args = _cpu(input_gates, hidden_gates, cx, input_bias, hidden_bias)
    gates = ig + hg
    if ib is not None:
        gates = gates + ib + hb
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * c + i * g
    hy = o * cy.tanh()
    return _out("_thnn_fused_lstm_cell", args, (hy, cy, torch.cat((i, f, g, o), 1)))


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    ghy, gcy, c, cy_, ws = args = _cpu(grad_hy, grad_cy, cx, cy, workspace)
    i, f, g, o = ws.chunk(4, 1)
    tanh_cy = cy_.tanh()
    gc = torch.zeros_like(cy_) if gcy is None else gcy.clone()
    if ghy is not None:
        gc = gc + ghy * o * (1 - tanh_cy * tanh_cy)
        go = ghy * tanh_cy * o * (1 - o)
    else:
        go = torch.zeros_like(o)
    gi = gc * g * i * (1 - i)
    gf = gc * c * f * (1 - f)
    gg = gc * i * (1 - g * g)
    grad_gates = torch.cat((gi, gf, gg, go), 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return _out("_thnn_fused_lstm_cell_backward_impl", args, (grad_gates, gc * f, grad_bias))


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ig, hg, h, ib, hb = args = _cpu(input_gates, hidden_gates, hx, input_bias, hidden_bias)
    if ib is not None:
        ig, hg = ig + ib, hg + hb
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (h - n)
    return _out("_thnn_fused_gru_cell", args, (hy, torch.cat((r, z, n, h, hn), 1)))


def gru_cell_backward(grad_hy, workspace, has_bias):
    ghy, ws = args = _cpu(grad_hy, workspace)
    r, z, n, h, hn = ws.chunk(5, 1)
    gz = ghy * (h - n) * z * (1 - z)
    gn = ghy * (1 - z) * (1 - n * n)
    gr = gn * hn * r * (1 - r)
    grad_input = torch.cat((gr, gz, gn), 1)
    grad_hidden = torch.cat((gr, gz, gn * r), 1)
    grad_ib = grad_input.sum(0) if has_bias else None
    grad_hb = grad_hidden.sum(0) if has_bias else None
    results = (grad_input, grad_hidden, ghy * z, grad_ib, grad_hb)
    return _out("_thnn_fused_gru_cell_backward", args, results)


KERNELS = {  # aten op -> its PrivateUse1 kernel
    "_thnn_fused_lstm_cell": lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "_thnn_fused_gru_cell": gru_cell,
    "_thnn_fused_gru_cell_backward": gru_cell_backward,
}
