"""Speculative-decoding acceptance of the `hicache run` model with and without cache hits.

The target (TinyModel) and its draft (`model.draft_of`: the target's first layer) keep their
KV in one HiCache: the target's in the target pool, the draft's in a dependent DRAFT_KV pool
(packed or sidecar, `hicache.runtime.draft`). Requests share prefixes, the device pool is
small, so prefixes come back from host. For each request the target generates greedily and
the draft guesses each next token; the acceptance rate is the fraction of guesses equal to
the target's token (greedy speculative decoding, one draft token per step).

Every token is computed alone (one row per matmul), so a restored prefix gives bit-identical
activations to a recompute: the acceptance with the cache must equal the acceptance without
it. With the draft restore disabled (`draft.FAULTS.skip_draft_restore`, reference bug 13)
the draft attends over a zeroed prefix and its acceptance on hits collapses: the number
shows it.
"""
from __future__ import annotations

import dataclasses
import random

import torch

from hicache.dist.model import ModelConfig, TinyModel, draft_of
from hicache.runtime.config import CacheConfig


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AcceptConfig:
    requests: int = 16
    prefixes: int = 3           # distinct shared prefixes
    prefix_pages: int = 3
    suffix_tokens: int = 3      # the request's own tokens after the shared prefix (< a page)
    generate: int = 12          # tokens generated per request
    page_size: int = 4
    device_pages: int = 8       # small: prefixes fall back to host
    host_pages: int = 64
    layout: str = "packed"      # the draft KV pool's layout
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("requests", "prefixes", "prefix_pages", "generate", "page_size", "device_pages",
                     "host_pages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 1 <= self.suffix_tokens < self.page_size:
            raise ValueError(f"suffix_tokens: must be in [1, page_size), got {self.suffix_tokens}")


class _Stream:
    """One model's incremental KV (per layer, [t, heads, head_dim]) and its forward."""

    def __init__(self, model: TinyModel) -> None:
        self.m = model
        self.k: list[list[torch.Tensor]] = [[] for _ in range(model.cfg.layers)]
        self.v: list[list[torch.Tensor]] = [[] for _ in range(model.cfg.layers)]

    def extend(self, k: list[torch.Tensor], v: list[torch.Tensor]) -> None:
        """Append restored KV (per layer, [t, heads, head_dim])."""
        for layer in range(self.m.cfg.layers):
            self.k[layer].append(k[layer])
            self.v[layer].append(v[layer])

    def step(self, token: int, pos: int) -> torch.Tensor:
        """Feed one token at `pos`; returns its logits."""
        m = self.m
        h = m.embed_tokens([token], pos)
        for layer in range(m.cfg.layers):
            q, k, v = m.qkv(layer, h)
            self.k[layer].append(k)
            self.v[layer].append(v)
            keys, vals = torch.cat(self.k[layer]), torch.cat(self.v[layer])
            h = m.finish_layer(layer, h, m.attend(q, keys, vals, torch.tensor([pos])))
        return m.logits(h)[0]

    def kv_rows(self, layer: int, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat(self.k[layer])[start:end], torch.cat(self.v[layer])[start:end]


def _read(pool, pages: list[int], layers: int, heads: int, hd: int):
    """Per-layer (K, V) [t, heads, hd] of the pages, from the pool's bytes."""
    ks, vs = [], []
    for layer in range(layers):
        view = pool.layer_view(layer)[:, pages]          # (kv, n, ps, row bytes)
        f = view.contiguous().view(torch.float32)
        ks.append(f[0].reshape(-1, heads, hd))
        vs.append(f[1].reshape(-1, heads, hd))
    return ks, vs


def _write(pool, pages: list[int], stream: _Stream, start: int) -> None:
    """Pages [start, start + len(pages)) of the stream's KV into the pool's pages."""
    ps = pool.cfg.page_size
    if not pages:
        return
    for layer in range(stream.m.cfg.layers):
        k, v = stream.kv_rows(layer, start * ps, (start + len(pages)) * ps)
        for plane, x in ((0, k), (1, v)):
            rows = x.reshape(len(pages), ps, -1).contiguous().view(torch.uint8)
            pool.layer_view(layer)[plane, pages] = rows


def acceptance(cfg: AcceptConfig, model_cfg: ModelConfig | None = None, use_cache: bool = True) -> dict:
    """Serve the request stream; returns acceptance and hit figures (`per_request`: draft
    tokens accepted per request; `hit_requests`: indices whose prefix came from the cache)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # one-row ops: a thread pool only adds contention
    try:
        return _acceptance(cfg, model_cfg, use_cache)
    finally:
        torch.set_num_threads(threads)


def _acceptance(cfg: AcceptConfig, model_cfg: ModelConfig | None, use_cache: bool) -> dict:
    from hicache.runtime.cache import HiCache
    from hicache.runtime.draft import DependentSet, DependentSpec, DraftConfig, Role
    mc = model_cfg or ModelConfig(layers=2, heads=2, head_dim=8, vocab=64)
    target = TinyModel(mc)
    drafter = draft_of(target, 1)
    ps = cfg.page_size
    rng = random.Random(cfg.seed)
    prefixes = [[rng.randrange(mc.vocab) for _ in range(cfg.prefix_pages * ps)] for _ in range(cfg.prefixes)]
    ccfg = CacheConfig(page_size=ps, device_pages=cfg.device_pages, host_pages=cfg.host_pages,
                       layers=mc.layers, heads=mc.heads, head_dim=mc.head_dim, dtype="float32",
                       model="hicache-tiny-spec")
    deps = DependentSet(DraftConfig(ccfg, (DependentSpec(role=Role.DRAFT_KV, layout=cfg.layout, layers=1,
                                                         heads=mc.heads, head_dim=mc.head_dim,
                                                         dtype="float32"),)))
    cache = HiCache(ccfg, deps=deps) if use_cache else None
    per_request: list[int] = []
    hit_requests: list[int] = []
    hit_tokens = 0
    try:
        for i in range(cfg.requests):
            prompt = list(rng.choice(prefixes)) + [rng.randrange(mc.vocab) for _ in range(cfg.suffix_tokens)]
            full = len(prompt) // ps
            t, d = _Stream(target), _Stream(drafter)
            cached = 0
            req = None
            if cache is not None:
                req = cache.match(prompt[:full * ps])
                cache.load_back(req)
                deps.read(req, "draft_kv")           # waits on the loads' completion
                pages = cache.prefix_pages(req)
                cached = len(pages)
                if cached:
                    t.extend(*_read(cache.device_pool, pages, mc.layers, mc.heads, mc.head_dim))
                    d.extend(*_read(deps.device[Role.DRAFT_KV], pages, 1, mc.heads, mc.head_dim))
            hit_tokens += cached * ps
            for pos in range(cached * ps, len(prompt)):
                lt = t.step(prompt[pos], pos)
                ld = d.step(prompt[pos], pos)
            if cache is not None:
                new = cache.alloc(full - cached)
                if new is not None:
                    _write(cache.device_pool, new, t, cached)
                    _write(deps.device[Role.DRAFT_KV], new, d, cached)
                    cache.insert(req, new)
                    cache.backup(req.node)
                cache.finish(req)
                cache.poll()
            # greedy generation by the target; the draft guesses each next token
            a = 0
            pos = len(prompt)
            for _ in range(cfg.generate):
                nxt = int(lt.argmax())
                a += int(int(ld.argmax()) == nxt)
                lt, ld = t.step(nxt, pos), d.step(nxt, pos)
                pos += 1
            per_request.append(a)
            if cached:
                hit_requests.append(i)
    finally:
        if cache is not None:
            cache.close()
    proposed = cfg.generate * cfg.requests
    return {"acceptance": round(sum(per_request) / proposed, 4), "accepted": sum(per_request),
            "proposed": proposed, "per_request": per_request, "hit_requests": hit_requests,
            "hit_tokens": hit_tokens, "host_hit_tokens": cache.metrics.host_hit_tokens if cache else 0}


def _on(res: dict, idx: list[int], generate: int) -> float | None:
    return round(sum(res["per_request"][i] for i in idx) / (generate * len(idx)), 4) if idx else None


def compare(cfg: AcceptConfig) -> dict:
    """Acceptance without a cache, with it, and with it under the bug-13 fault."""
    from hicache.runtime import draft
    base = acceptance(cfg, use_cache=False)
    cached = acceptance(cfg)
    from hicache.monitors.attach import unmonitored
    prev = draft.FAULTS.skip_draft_restore
    draft.FAULTS.skip_draft_restore = True
    try:
        # the fault is the measurement here: verified mode must not stop this run at it
        with unmonitored():
            broken = acceptance(cfg)
    finally:
        draft.FAULTS.skip_draft_restore = prev
    hits = cached["hit_requests"]
    g = cfg.generate
    return {
        "layout": cfg.layout, "requests": cfg.requests, "hit_requests": len(hits),
        "hit_tokens": cached["hit_tokens"], "host_hit_tokens": cached["host_hit_tokens"],
        # acceptance on the requests whose prefix the cache served, and on all requests
        "acceptance_on_hits": {"recomputed": _on(base, hits, g), "cached": _on(cached, hits, g),
                               "cached_without_draft_restore": _on(broken, hits, g)},
        "acceptance": {"recomputed": base["acceptance"], "cached": cached["acceptance"],
                       "cached_without_draft_restore": broken["acceptance"]},
        "same_with_and_without_hits": base["per_request"] == cached["per_request"],
    }
