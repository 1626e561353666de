"""The small model that `hicache run` serves: a few transformer layers with seeded weights.

No downloads: weights come from a seeded torch.Generator, identical on every rank. Each
rank builds every layer (they are tiny) so the last stage can check its logits against a
full recompute without a cache. Attention is the torch reference over [cached prefix | new].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from hicache.validate import int_at_least


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """Invariant: every field >= 1."""
    vocab: int = 64
    layers: int = 4
    heads: int = 2
    head_dim: int = 8
    max_len: int = 256
    seed: int = 1234

    def __post_init__(self) -> None:
        for name in ("vocab", "layers", "heads", "head_dim", "max_len"):
            int_at_least(name, getattr(self, name), 1)

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class TinyModel:
    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        d = cfg.hidden

        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g) / shape[0] ** 0.5

        self.embed = torch.randn(cfg.vocab, d, generator=g)
        self.pos = torch.randn(cfg.max_len, d, generator=g) * 0.1
        self.wq = [w(d, d) for _ in range(cfg.layers)]
        self.wk = [w(d, d) for _ in range(cfg.layers)]
        self.wv = [w(d, d) for _ in range(cfg.layers)]
        self.wo = [w(d, d) for _ in range(cfg.layers)]
        self.w1 = [w(d, 2 * d) for _ in range(cfg.layers)]
        self.w2 = [w(2 * d, d) for _ in range(cfg.layers)]
        self.unembed = w(d, cfg.vocab)

    def embed_tokens(self, tokens: list[int], start: int) -> torch.Tensor:
        if start + len(tokens) > self.cfg.max_len:
            raise ValueError(f"sequence of {start + len(tokens)} tokens exceeds max_len {self.cfg.max_len}")
        ids = torch.tensor(tokens, dtype=torch.long)
        return self.embed[ids] + self.pos[start:start + len(tokens)]

    def qkv(self, layer: int, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[m, d] -> q, k, v as [m, heads, head_dim]."""
        x = _rms(h)
        shape = (h.shape[0], self.cfg.heads, self.cfg.head_dim)
        return ((x @ self.wq[layer]).view(shape), (x @ self.wk[layer]).view(shape), (x @ self.wv[layer]).view(shape))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor) -> torch.Tensor:
        """Causal attention: query at position p sees keys 0..p. k/v cover positions 0..T-1."""
        scores = torch.einsum("mhd,thd->hmt", q, k) / self.cfg.head_dim ** 0.5
        k_pos = torch.arange(k.shape[0])
        scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        out = torch.einsum("hmt,thd->mhd", scores.softmax(-1), v)
        return out.reshape(q.shape[0], self.cfg.hidden)

    def finish_layer(self, layer: int, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = h + attn @ self.wo[layer]
        return h + torch.relu(_rms(h) @ self.w1[layer]) @ self.w2[layer]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return _rms(h) @ self.unembed

    def reference(self, tokens: list[int]) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Full recompute without any cache: logits [n, vocab] and per-layer (K, V)."""
        h = self.embed_tokens(tokens, 0)
        pos = torch.arange(len(tokens))
        kvs = []
        for layer in range(self.cfg.layers):
            q, k, v = self.qkv(layer, h)
            kvs.append((k, v))
            h = self.finish_layer(layer, h, self.attend(q, k, v, pos))
        return self.logits(h), kvs


def draft_of(target: TinyModel, layers: int = 1) -> TinyModel:
    """A draft model for speculative decoding: the target's first `layers` layers with its
    embeddings and unembedding (shared tensors), so its greedy guesses often match."""
    if not 1 <= layers <= target.cfg.layers:
        raise ValueError(f"layers must be in [1, {target.cfg.layers}], got {layers}")
    from dataclasses import replace
    d = TinyModel.__new__(TinyModel)
    d.cfg = replace(target.cfg, layers=layers)
    d.embed, d.pos, d.unembed = target.embed, target.pos, target.unembed
    for name in ("wq", "wk", "wv", "wo", "w1", "w2"):
        setattr(d, name, getattr(target, name)[:layers])
    return d
