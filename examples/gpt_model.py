"""GPT-2 style decoder used by the GPT example, its tests and its benchmarks."""

import math

import numpy as np
import oneflow as flow
from oneflow import nn


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with separate q, k, v projections (Megatron splits them by
    head)."""

    def __init__(self, hidden: int, heads: int, seq_len: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"--hidden {hidden} must be a multiple of --heads {heads}")
        self.heads = heads
        self.head_dim = hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.proj = nn.Linear(hidden, hidden)
        mask = np.triu(np.full((seq_len, seq_len), -1e4, dtype=np.float32), k=1)
        self.register_buffer("causal_mask", flow.tensor(mask))

    def _heads(self, x, batch, seq):
        return x.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q = self._heads(self.q(x), batch, seq)
        k = self._heads(self.k(x), batch, seq)
        v = self._heads(self.v(x), batch, seq)
        att = flow.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim))
        att = flow.softmax(att + self.causal_mask, dim=-1)
        y = flow.matmul(att, v).transpose(1, 2).reshape(batch, seq, hidden)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, seq_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, seq_len)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + learned position embeddings, pre-LN blocks, final LN, LM head tied to wte."""

    def __init__(self, layers: int, hidden: int, heads: int, seq_len: int, vocab: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        nn.init.normal_(self.wte.weight, std=0.02)  # GPT-2's init; N(0, 1) makes tied logits huge
        self.wpe = nn.Parameter(flow.randn(seq_len, hidden) * 0.02)
        self.h = nn.Sequential(*[Block(hidden, heads, seq_len) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.vocab = vocab

    def forward(self, idx):
        x = self.h(self.wte(idx) + self.wpe)
        logits = flow.matmul(self.ln_f(x), self.wte.weight, transpose_b=True)
        return logits


class GPTLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def forward(self, logits, targets):
        return self.ce(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
