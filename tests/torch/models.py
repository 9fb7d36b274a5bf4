"""Small, ordinary model definitions, written as their papers and popular codebases write them
(plain torch, no trnsim): the families users bring to the `neuron` device. Sizes are tiny so
that three training steps on both devices take well under a second each."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, SEQ, BATCH = 61, 32, 4, 12, 3


class GPT2Block(nn.Module):
    def __init__(self, d: int = DIM, h: int = HEADS):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d, d))  # fmt: skip

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    """GPT-2: learned positions, pre-norm blocks, the output projection tied to the input
    embedding (`tie_word_embeddings=True`)."""

    def __init__(self, layers: int = 2, tied: bool = True):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(GPT2Block() for _ in range(layers))
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotary(x, theta: float = 10000.0):
    """Rotary position embeddings on [batch, heads, seq, head_dim], as Llama applies them."""
    n, d = x.shape[-2], x.shape[-1]
    freqs = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device).float() / d)
    angles = torch.outer(torch.arange(n, device=x.device).float(), freqs)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary embeddings, grouped-query attention (2 KV heads for 4 query heads),
    SwiGLU."""

    def __init__(self, d: int = DIM, h: int = HEADS, kv: int = 2):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv * self.hd, bias=False)
        self.v = nn.Linear(d, kv * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, 3 * d, bias=False)
        self.down = nn.Linear(3 * d, d, bias=False)
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, n, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(b, n, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, n, self.kv, self.hd).transpose(1, 2)
        q, k = rotary(q), rotary(k)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, -1))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers: int = 2, tied: bool = False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(layers))
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


class Bert(nn.Module):
    """A BERT-style encoder (post-norm TransformerEncoderLayers, token type and position
    embeddings) with a classification head on the first token."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.tok, self.pos, self.typ = (nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM),
                                        nn.Embedding(2, DIM))  # fmt: skip
        self.ln = nn.LayerNorm(DIM)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, 2 * DIM, dropout=0.0, batch_first=True,
                                           activation="gelu")  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.pool = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos) + self.typ(torch.zeros_like(ids)))
        x = self.encoder(x)
        return self.head(torch.tanh(self.pool(x[:, 0])))


class T5(nn.Module):
    """An encoder-decoder (cross-attention in the decoder), shared input embedding and the
    output projection tied to it, as T5 does."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, DIM)
        self.t = nn.Transformer(DIM, HEADS, 1, 1, 2 * DIM, dropout=0.0, batch_first=True,
                                norm_first=True)  # fmt: skip
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.lm_head.weight = self.shared.weight

    def forward(self, ids):
        src, tgt = ids, ids.roll(1, 1)
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        y = self.t(self.shared(src), self.shared(tgt), tgt_mask=mask)
        return self.lm_head(y * DIM**-0.5)


class ViT(nn.Module):
    """Patch embedding (a strided convolution), a class token, learned positions, pre-norm
    encoder layers, a classifier on the class token."""

    def __init__(self, image: int = 16, patch: int = 4, classes: int = 7):
        super().__init__()
        self.patch = nn.Conv2d(3, DIM, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + (image // patch) ** 2, DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, 2 * DIM, dropout=0.0, batch_first=True,
                                           norm_first=True)  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, classes))

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.encoder(x)[:, 0])


class CNN(nn.Module):
    """Convolutions with BatchNorm, max and average pooling, dropout."""

    def __init__(self, classes: int = 7):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )  # fmt: skip
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 4, classes)

    def forward(self, x):
        return self.fc(self.drop(self.features(x).flatten(1)))


class Recurrent(nn.Module):
    """A 2-layer bidirectional LSTM or GRU over embeddings, classifying the last step."""

    def __init__(self, kind: str, classes: int = 5):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        cell = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = cell(DIM, DIM // 2, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(DIM, classes)

    def forward(self, ids):
        y, _ = self.rnn(self.embed(ids))
        return self.head(y[:, -1])


def tokens(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def images(seed: int = 0, size: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, 3, size, size, generator=g)


def lm_loss(logits, ids):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def class_loss(logits, _x):
    labels = torch.arange(logits.shape[0], device=logits.device) % logits.shape[1]
    return F.cross_entropy(logits, labels)


MODELS = {  # name -> (make the model, make an input batch, the loss)
    "gpt2_tied": (lambda: GPT2(tied=True), tokens, lm_loss),
    "llama_untied": (lambda: Llama(tied=False), tokens, lm_loss),
    "llama_tied": (lambda: Llama(tied=True), tokens, lm_loss),
    "bert_classifier": (Bert, tokens, class_loss),
    "t5_encoder_decoder": (T5, tokens, lm_loss),
    "vit": (ViT, images, class_loss),
    "cnn_batchnorm": (CNN, lambda s=0: images(s, 12), class_loss),
    "lstm_bidirectional": (lambda: Recurrent("lstm"), tokens, class_loss),
    "gru_bidirectional": (lambda: Recurrent("gru"), tokens, class_loss),
}
