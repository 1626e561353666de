"""Replay a trace through the real cache (hicache.runtime.HiCache), one request at a time.

Per request: match -> load back the host run -> prefetch from storage (policy decides)
-> load that back -> allocate and insert the new pages -> finish -> poll completions.
`kv="metadata"` skips KV bytes (trace scale); `kv="small"` moves real bytes through tiny
pools, stamps each page with its own tokens and verifies every restored page.
"""
from __future__ import annotations

import array
import contextlib
import dataclasses
import enum
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from hicache.replay.trace import (INT64_MAX, LoadedTrace, TraceError, TraceRequest, check_limit,
                                  check_page_size, check_source, expand, iter_requests, read_trace)
from hicache.runtime.config import CacheConfig, PrefetchPolicy, WritePolicy


class KVMode(enum.StrEnum):
    METADATA = "metadata"
    SMALL = "small"


class StorageKind(enum.StrEnum):
    NONE = "none"
    FILE = "file"
    MOONCAKE = "mooncake"
    MEMORY = "memory"   # an in-process dict: the same protocol, no file I/O (fast sweeps)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReplayConfig:
    page_size: int = 64
    device_tokens: int = 2_000_000   # capacities in tokens, rounded down to whole pages
    host_tokens: int = 0
    storage: StorageKind = StorageKind.NONE
    kv: KVMode = KVMode.METADATA
    write_policy: WritePolicy = WritePolicy.WRITE_THROUGH
    prefetch_policy: PrefetchPolicy = PrefetchPolicy.WAIT_COMPLETE
    limit: int | None = None
    sync: bool = False      # apply every transfer before the next request: deterministic
    cp: int = 1             # context-parallel ranks; device_tokens is then memory per rank
    shard: bool = True      # cp > 1: shard pages over owner ranks (False: every rank replicates)

    def __post_init__(self) -> None:
        check_page_size(self.page_size)
        if not isinstance(self.cp, int) or isinstance(self.cp, bool) or self.cp < 1:
            raise ValueError(f"cp: must be a positive int, got {self.cp!r}")
        for name in ("device_tokens", "host_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= INT64_MAX:
                raise ValueError(f"{name}: must be a non-negative int that fits int64, got {v!r}")
        check_limit(self.limit)
        if self.device_tokens < self.page_size:
            raise ValueError(f"device_tokens: must hold at least one page, got {self.device_tokens}")
        # a host tier under one page would be dropped silently (and a storage tier with it)
        if 0 < self.host_tokens < self.page_size:
            raise ValueError(f"host_tokens: must hold at least one page ({self.page_size} tokens) "
                             f"or be 0 (no host tier), got {self.host_tokens}")
        object.__setattr__(self, "storage", StorageKind(self.storage))
        object.__setattr__(self, "kv", KVMode(self.kv))
        object.__setattr__(self, "write_policy", WritePolicy(self.write_policy))
        object.__setattr__(self, "prefetch_policy", PrefetchPolicy(self.prefetch_policy))
        if self.storage is not StorageKind.NONE and self.host_tokens == 0:
            raise ValueError("host_tokens: storage needs a host tier (storage -> host -> device)")
        if self.write_policy is WritePolicy.WRITE_BACK and self.host_tokens:
            # (the cache's own check counts pages over every rank: named here in the units and
            # fields a replay is configured in)
            # (the cache's device tier: every rank's pages when sharded, one rank's otherwise)
            dev_pages = self.device_tokens // self.page_size * self.ranks_holding
            host_pages = self.host_tokens // self.page_size
            if host_pages < dev_pages:
                per_rank = f" ({self.cp} ranks x {self.device_tokens // self.page_size})" \
                    if self.ranks_holding > 1 else ""
                raise ValueError(f"host_tokens: write_back keeps every evicted page's only copy on host, so the "
                                 f"host tier needs at least the device tier's pages: {host_pages} host pages "
                                 f"< {dev_pages} device pages{per_rank}: at least {dev_pages * self.page_size} host "
                                 f"tokens (or another write policy)")
        self.check_memory()

    def memory_bytes(self) -> dict[str, int]:
        """Bytes the cache allocates up front for each capacity: one state byte per host
        slot, and with small KV the pools themselves (device: per rank holding pages)."""
        c = self.cache_config()
        kv_per_token = 2 * c.layers * c.heads * c.head_dim * _SMALL_ITEMSIZE if self.kv is KVMode.SMALL else 0
        return {"device_tokens": c.device_pages * c.page_size * kv_per_token,
                "host_tokens": c.host_pages * (1 + c.page_size * kv_per_token)}

    def check_memory(self) -> None:
        """Refuse, naming the capacity, a setup whose allocations exceed this machine's
        memory: the allocator would fail deep in the cache (or the OOM killer later)."""
        avail = _available_memory()
        need = self.memory_bytes()
        if avail is None or sum(need.values()) <= avail:
            return
        name = max(need, key=need.get)
        raise ValueError(f"{name}: {getattr(self, name):,} tokens (kv {self.kv.value}) need "
                         f"{sum(need.values()):,} bytes (device {need['device_tokens']:,}, "
                         f"host {need['host_tokens']:,}), "
                         f"more than this machine's available memory ({avail:,} bytes)")

    @property
    def sharded(self) -> bool:
        return self.cp > 1 and self.shard

    @property
    def ranks_holding(self) -> int:
        """Ranks whose device memory adds up to the logical device capacity."""
        return self.cp if self.sharded else 1

    def make_cache(self, storage=None):
        """The real cache for this setup: sharded page accounting when `sharded`."""
        from hicache.runtime.cache import HiCache
        if self.sharded:
            from hicache.replay.cp import ShardedCache
            return ShardedCache(self.cache_config(), self.cp, storage=storage)
        return HiCache(self.cache_config(), storage=storage)

    def cache_config(self) -> CacheConfig:
        small = self.kv is KVMode.SMALL
        # small KV: one head of 4 fp16 = 8 bytes per token row = the token id itself
        return CacheConfig(page_size=self.page_size,
                           device_pages=self.device_tokens // self.page_size * self.ranks_holding,
                           host_pages=self.host_tokens // self.page_size,
                           layers=2, heads=1, head_dim=4, dtype="float16",
                           write_policy=self.write_policy, prefetch_policy=self.prefetch_policy,
                           metadata_only=not small, model="replay")


#: bytes per element of the small-KV pools (float16, as cache_config sets)
_SMALL_ITEMSIZE = 2


def _available_memory() -> int | None:
    """MemAvailable (Linux), else physical memory; None where neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _network_store_config():
    from hicache.storage.safe import SafeConfig
    return SafeConfig(timeout_s=2.0, trip_after=3, cooldown_s=30.0)


def open_storage(kind: StorageKind, stack: contextlib.ExitStack):
    """The backend for `kind`, closed (and its server stopped) when `stack` unwinds."""
    if kind is StorageKind.NONE:
        return None
    if kind is StorageKind.MEMORY:
        from hicache.replay.memstore import MemoryStorage
        store = MemoryStorage()
    elif kind is StorageKind.FILE:
        from hicache.storage.file_store import FileStorage
        store = FileStorage(stack.enter_context(tempfile.TemporaryDirectory(prefix="hicache-replay-")))
    else:  # raises MooncakeUnavailable with its reason when the store cannot run here
        from hicache.storage.mooncake_server import MooncakeMaster
        from hicache.storage.mooncake_store import MooncakeStorage, MooncakeStoreConfig
        master = MooncakeMaster.start()
        stack.callback(master.stop)
        # a network store answers within the call's bound, and one that stopped answering
        # (a dead master takes seconds per call) trips the breaker: the rest of the replay
        # fails its storage calls at once, counted, instead of crawling for minutes
        from hicache.storage.safe import SafeStorage
        store = SafeStorage(MooncakeStorage(MooncakeStoreConfig.for_master(master)), _network_store_config())
    stack.callback(store.close)
    return store


class _Stamp:
    """Small-KV content: plane/layer q of a page holds its token ids (int64) + q."""

    def __init__(self, cache) -> None:
        self.pool = cache.device_pool
        c = cache.cfg
        self.planes = c.kv * c.layers
        self.ps = c.page_size

    def expected(self, key: bytes, first: int, count: int):
        import torch
        toks = np.frombuffer(key, dtype="<i8", count=count * self.ps, offset=first * self.ps * 8)
        base = torch.from_numpy(toks.copy()).view(count, self.ps, 1)
        q = torch.arange(self.planes, dtype=torch.int64).view(self.planes, 1, 1, 1)
        return (base.unsqueeze(0) + q).view(torch.uint8)   # (planes, count, ps, 8)

    def write(self, key: bytes, first: int, pages: list[int]) -> None:
        import torch
        if not pages:
            return
        buf = self.pool.buf.view(self.planes, self.pool.pages, self.ps, -1)
        buf[:, torch.as_tensor(pages)] = self.expected(key, first, len(pages))

    def verify(self, key: bytes, pages: list[int]) -> int:
        """Number of pages whose bytes differ from what was written (0 when correct)."""
        import torch
        if not pages:
            return 0
        buf = self.pool.buf.view(self.planes, self.pool.pages, self.ps, -1)
        got = buf[:, torch.as_tensor(pages)]
        bad = (got != self.expected(key, 0, len(pages))).flatten(2).any(dim=2).any(dim=0)
        return int(bad.sum())


class TraceStream:
    """Streams (key, input_length) from a trace file or a `LoadedTrace`, timing its own work
    so the replay's `seconds` counts cache calls only (the baseline expands its trace
    untimed). A file that is not regular (a pipe: /dev/stdin) is streamed once only."""

    def __init__(self, source: str | LoadedTrace, page_size: int, limit: int | None) -> None:
        self.source, self.page_size, self.limit = source, page_size, limit
        self.path = source.path if isinstance(source, LoadedTrace) else source
        self.seconds = 0.0
        self.timestamps = array.array("q")   # ms, one per request yielded (cost model)
        self._read_once = False    # a pipe was read: a second pass would see no request

    def __iter__(self) -> Iterator[tuple[bytes, int]]:
        pc = time.perf_counter
        if not isinstance(self.source, LoadedTrace):
            if self._read_once:
                raise TraceError(f"{self.path}: not a regular file, already read: load it once "
                                 f"(LoadedTrace) to replay it again")
            self._read_once = not check_source(self.source)
        it = iter(iter_requests(self.source, self.limit))
        del self.timestamps[:]
        while True:
            t0 = pc()
            r = next(it, None)
            item = None if r is None else (expand(r, self.page_size), r.input_length)
            self.seconds += pc() - t0
            if item is None:
                return
            self.timestamps.append(r.timestamp)
            yield item


class Served:
    """Per-request tokens by where they came from (device, host, storage; the rest is
    computed), in request order: compact arrays, so traces of any length fit."""

    __slots__ = ("input", "device", "host", "storage")

    def __init__(self) -> None:
        self.input, self.device, self.host, self.storage = (array.array("q") for _ in range(4))

    def add(self, n_tokens: int, device: int, host: int, storage: int) -> None:
        self.input.append(n_tokens)
        self.device.append(device)
        self.host.append(host)
        self.storage.append(storage)

    def __len__(self) -> int:
        return len(self.input)


def _make_cache(cfg: ReplayConfig, storage):
    """cfg.make_cache, with an allocation failure (check_memory passed, but the allocator
    still refused) reported as a ValueError naming the capacities, not a torch traceback."""
    import torch
    try:
        return cfg.make_cache(storage)
    except (MemoryError, torch.OutOfMemoryError) as exc:
        err: BaseException = exc
    except RuntimeError as exc:     # torch's CPU allocator raises a plain RuntimeError
        if "alloc" not in str(exc).lower():
            raise
        err = exc
    need = cfg.memory_bytes()
    name = max(need, key=need.get)
    why = str(err).splitlines()[0] if str(err) else type(err).__name__
    raise ValueError(f"{name}: cannot allocate the cache for device_tokens {cfg.device_tokens:,} and "
                     f"host_tokens {cfg.host_tokens:,} (kv {cfg.kv.value}, {sum(need.values()):,} "
                     f"bytes): {why}") from None


def replay_requests(cfg: ReplayConfig, requests: Iterable[tuple[bytes, int]], storage=None,
                    served: Served | None = None, on_cache: Callable[[Any], None] | None = None) -> dict:
    """Drive HiCache over (key, input_length) pairs; returns the report. `seconds` excludes
    the time an `TraceStream` spends producing the pairs. `served` (optional) receives each
    request's tokens per tier; `on_cache` (optional) the cache, once built and before it
    serves (a caller's own monitors: the bug zoo's clean sweep of trace replays)."""
    cache = _make_cache(cfg, storage)
    if on_cache is not None:
        try:
            on_cache(cache)
        except BaseException:
            cache.close()
            raise
    stamp = _Stamp(cache) if cfg.kv is KVMode.SMALL else None
    has_host = cache.host is not None
    has_storage = storage is not None
    pb = cfg.page_size * 8
    sync = cfg.sync and has_host
    corrupt = 0
    uncached = 0
    t0 = time.perf_counter()
    try:
        for key, n_tokens in requests:
            req = cache.match(key, n_tokens=n_tokens)
            if has_host:
                cache.load_back(req)
                if has_storage and cache.prefetch(req) and cache.finish_prefetch(req):
                    cache.load_back(req, _tier="storage")
                for op in req.loads:
                    op.wait()
            prefix = cache.prefix_pages(req)
            if stamp is not None:
                corrupt += stamp.verify(key, prefix)
            new = cache.alloc(len(key) // pb - len(prefix))
            if new is None:         # every device page is locked: serve uncached
                uncached += 1
            else:
                if stamp is not None:
                    stamp.write(key, len(prefix), new)
                cache.insert(req, new)
            cache.finish(req)
            if served is not None:
                ps = cfg.page_size
                served.add(n_tokens, req.device_hit * ps, req.host_hit * ps, req.storage_hit * ps)
            if sync:
                cache.drain()
            elif has_host:
                cache.poll()
        cache.drain()
    except BaseException as e:
        from hicache.runtime.cache import close_after
        close_after(cache, e)       # (the first error is the one reported: a violation, say)
        raise
    cache.close()
    seconds = time.perf_counter() - t0 - getattr(requests, "seconds", 0.0)
    m = cache.metrics
    total = m.input_tokens
    monitors = None
    if "hicache.monitors.attach" in sys.modules:     # (verified mode imported it: monitors ran)
        monitors = sys.modules["hicache.monitors.attach"].monitor_report(cache)

    def tier(hit: int) -> dict:
        return {"hit_tokens": hit, "hit_rate": hit / total if total else 0.0}

    return {
        "requests": m.requests,
        "input_tokens": total,
        "hit_tokens": m.hit_tokens,
        "hit_rate": m.hit_rate,
        "tiers": {"device": tier(m.device_hit_tokens), "host": tier(m.host_hit_tokens),
                  "storage": tier(m.storage_hit_tokens)},
        "seconds": seconds,
        "kv": cfg.kv.value,
        "corrupt_pages": corrupt if stamp is not None else None,
        "uncached_requests": uncached,
        "cp": {"ranks": cfg.cp, "shard": cfg.sharded,
               "device_tokens_per_rank": cfg.device_tokens // cfg.page_size * cfg.page_size,
               "logical_device_tokens": cache.cfg.device_pages * cfg.page_size},
        "metrics": m.as_dict(),
        # the backend's own counters (hits, misses, corrupt pages; behind a SafeStorage also
        # its timeouts, errors and calls failed at once by an open circuit)
        "storage": storage.stats() if storage is not None else None,
        # verified mode: per monitor its spec, the events it saw and the steps it checked
        "monitors": monitors,
    }


def load_requests(path: str, page_size: int, limit: int | None = None, start: int = 0) -> list[tuple[bytes, int]]:
    """(key, input_length) of the trace's requests `start`..`limit`-1 (every line up to
    `limit` is read and checked; only the window's keys are expanded)."""
    return [(expand(r, page_size), r.input_length) for r in itertools.islice(read_trace(path, limit), start, None)]


def replay(path: str, cfg: ReplayConfig, served: Served | None = None,
           stream: TraceStream | None = None) -> dict:
    """Parse, expand (streamed, untimed as the baseline does) and replay a trace file.
    `stream` (optional) is the TraceStream to use: its `timestamps` are filled."""
    reqs = stream or TraceStream(path, cfg.page_size, cfg.limit)
    with contextlib.ExitStack() as stack:
        out = replay_requests(cfg, reqs, open_storage(cfg.storage, stack), served)
    out["trace"] = path
    out["expand_seconds"] = reqs.seconds
    out["config"] = {"page_size": cfg.page_size, "device_tokens": cfg.device_tokens,
                     "host_tokens": cfg.host_tokens, "storage": cfg.storage.value,
                     "write_policy": cfg.write_policy.value,
                     "prefetch_policy": cfg.prefetch_policy.value,
                     "cp": cfg.cp, "shard": cfg.sharded}
    return out


__all__ = ["ReplayConfig", "KVMode", "StorageKind", "TraceStream", "Served", "replay", "replay_requests", "open_storage",
           "load_requests", "TraceRequest"]
