"""Support for the draft-state tests: an in-memory backend, configs, byte stamps."""
from __future__ import annotations

import hashlib
import threading

import numpy as np
import torch

from hicache.kernels import HitPolicy, IndexSource
from hicache.runtime.cache import HiCache
from hicache.runtime.config import CacheConfig, KVKind, PrefetchPolicy
from hicache.runtime.draft import DependentSet, DependentSpec, DraftConfig, Indexing, Role
from hicache.storage.base import StorageBackend

PS = 4


class DictStorage(StorageBackend):
    """A dict-backed backend (values cloned on set)."""

    def __init__(self) -> None:
        self.data: dict[str, torch.Tensor] = {}
        self._lock = threading.Lock()

    def batch_exists(self, keys):
        n = 0
        for k in keys:
            if k not in self.data:
                break
            n += 1
        return n

    def batch_get(self, keys):
        return [self.data.get(k) for k in keys]

    def batch_set(self, keys, values):
        with self._lock:
            for k, v in zip(keys, values):
                self.data[k] = v.clone()
        return [True] * len(keys)


def target_config(host_layout: str = "layer_first") -> CacheConfig:
    return CacheConfig(page_size=PS, device_pages=16, host_pages=32, layers=2, heads=2, head_dim=4,
                       dtype="float16", host_layout=host_layout,
                       prefetch_policy=PrefetchPolicy.WAIT_COMPLETE, model="draft-test")


def draft_config(target: CacheConfig, draft_layout: str = "packed") -> DraftConfig:
    """Draft KV (packed or sidecar), indexer (fp8, all pages), SWA (2 trailing pages),
    recurrent state (fp32, per request, last page of the SWA window)."""
    return DraftConfig(target, (
        DependentSpec(role=Role.DRAFT_KV, layout=draft_layout, layers=1, heads=2, head_dim=4,
                      dtype="float16"),
        DependentSpec(role=Role.DRAFT_INDEXER, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=4,
                      dtype="float8_e4m3fn"),
        DependentSpec(role=Role.SWA, layers=2, heads=1, head_dim=4, dtype="float16",
                      hit_policy=HitPolicy.TRAILING_PAGES, trailing=2),
        DependentSpec(role=Role.DRAFT_STATE, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=8,
                      dtype="float32", indexing=Indexing.REQUEST, source=IndexSource.SWA,
                      hit_policy=HitPolicy.TRAILING_PAGES, trailing=1),
    ))


def make_cache(storage=None, draft_layout: str = "packed", host_layout: str = "layer_first"):
    tcfg = target_config(host_layout)
    deps = DependentSet(draft_config(tcfg, draft_layout))
    return HiCache(tcfg, storage=storage, deps=deps), deps


def stamp(tag: str, tokens: list[int], page: int, nbytes: int) -> torch.Tensor:
    """The bytes page `page` of pool `tag` must hold: a digest of the token prefix it ends."""
    seed = hashlib.sha256(tag.encode() + repr(tokens[:(page + 1) * PS]).encode()).digest()
    reps = -(-nbytes // len(seed))
    return torch.from_numpy(np.frombuffer(seed * reps, dtype=np.uint8)[:nbytes].copy())


POOLS = ("target", "draft_kv", "draft_indexer", "swa", "draft_state")


def pool_of(cache: HiCache, deps: DependentSet, name: str):
    return cache.device_pool if name == "target" else deps.device[Role(name)]


def compute(cache: HiCache, deps: DependentSet, tokens: list[int], pools=POOLS):
    """Serve a request from scratch: write the pages of every pool in `pools` (names, "target"
    included), insert, back up to host."""
    req = cache.match(tokens)
    have = len(cache.prefix_pages(req))
    n = len(tokens) // PS
    pages = cache.alloc(n - have)
    for i, p in enumerate(pages, start=have):
        for name in pools:
            pool = pool_of(cache, deps, name)
            pool.write_page(p, stamp(name, tokens, i, pool.page_nbytes))
    cache.insert(req, pages)
    cache.backup(req.node)
    cache.finish(req)
    cache.drain()
    return req


def expected(name: str, deps: DependentSet | None, tokens: list[int], n_pages: int, nbytes: int):
    """Stamps of the pages a hit of n_pages restores for pool `name` (hit policy applied)."""
    idx = list(range(n_pages))
    if name != "target":
        idx = deps.pages_of(name, idx)
    return [stamp(name, tokens, i, nbytes) for i in idx]


#: the prefix the host-only fixtures cache: 2 pages of 4 tokens
TOKENS = list(range(100, 108))


def host_only_cache(verified, violation_dir: str):
    """A strict-monitored cache with dependent pools whose TOKENS prefix is on host only
    (device copies evicted and zeroed), its DraftState events recorded: (cache, deps, recorder)."""
    from hicache.runtime.events import Recorder
    verified.enable("strict", violation_dir=violation_dir)
    cache, deps = make_cache(draft_layout="sidecar")
    rec = Recorder()
    deps.bus.subscribe(rec)
    compute(cache, deps, TOKENS)
    assert cache.evict_device(cache.cfg.device_pages) > 0
    wipe_device(cache, deps)
    return cache, deps, rec


def complete_transfer(deps: DependentSet, tid: int) -> None:
    """Every copy of transfer tid finished, then its completion (the public steps)."""
    deps.finish_target(tid)
    for s in deps.cfg.sidecars:
        if s.role is not Role.SWA:
            deps.finish_draft(tid, s.role)
    deps.fire(tid)


def wipe_device(cache: HiCache, deps: DependentSet) -> None:
    """Zero every device pool: restored bytes can only come from host or storage."""
    cache.device_pool.buf.zero_()
    for pool in deps.device.values():
        pool.buf.zero_()


def raised_on_the_scheduler(fn, violation):
    """Run fn() (a poll, drain, read or close) and return the violation it raised, which must
    be `violation` when given: verified mode re-raises a check that failed on a transfer
    thread (kept on the op) on the scheduler's thread once the op's completion is applied."""
    import pytest
    from hicache.monitors.runtime import ProtocolViolation
    with pytest.raises(ProtocolViolation) as e:
        fn()
    assert violation is None or e.value is violation
    return e.value


def keep_records(deps: DependentSet) -> dict:
    """tid -> the set's Transfer record, kept by a listener from its launch on: the set
    drops a record when the transfer retires (a backup as it fires), a test reads it later."""
    from hicache.protocol.vocabulary import DraftState as D
    recs: dict = {}

    def keep(action, fields) -> None:
        if action == D.TransferLaunch:
            recs[fields["t"]] = deps.transfers[fields["t"]]
    deps.bus.subscribe(keep)
    return recs
