"""Two engines, prefill and decode, as separate process groups on torch.distributed (gloo),
handing a cached prefix over with `hicache.runtime.pd_handoff` (spec/PDHandoff.tla).

Rank 0 is the prefill engine, rank 1 the decode engine; each engine has its own process group
(`dist.new_group([0])`, `dist.new_group([1])`: what their TP collectives would run on), and
the handoff travels between the two over the world group's point-to-point ops (gloo
isend/recv: FIFO per peer). The prefill engine is a real `HiCache` whose prefix sits partly on
device, partly on host, partly in storage (a `FileStorage`), so it loads back before sending;
the decode engine is a page pool with a free list.

`pd_rank` is the launcher entry (`hicache.dist.launch.launch(pd_rank, 2, payload)`): it runs
one handoff per `Case` in the payload and returns, per run, both logs (initial snapshot and
events, for `hicache.monitors.maps.pd_handoff.check_handoff`), decode's reads and the leak
counts of each side (decode's after the finished request released its pages).
"""
from __future__ import annotations

import dataclasses
import hashlib
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from hicache.runtime import pd_handoff as pd
from hicache.runtime.allocator import PageAllocator
from hicache.runtime.config import CacheConfig, PrefetchPolicy
from hicache.validate import int_at_least

PREFILL, DECODE = 0, 1


def cache_config() -> CacheConfig:
    return CacheConfig(page_size=4, device_pages=16, host_pages=32, layers=2, heads=2, head_dim=4,
                       dtype="float16", prefetch_policy=PrefetchPolicy.WAIT_COMPLETE, model="pd-handoff")


def stamp(tokens: list[int], page: int, nbytes: int, page_size: int) -> torch.Tensor:
    """The KV bytes of page `page` of a prefix: a digest of the tokens it ends."""
    seed = hashlib.sha256(repr(tokens[:(page + 1) * page_size]).encode()).digest()
    reps = -(-nbytes // len(seed))
    return torch.from_numpy(np.frombuffer(seed * reps, dtype=np.uint8)[:nbytes].copy())


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    """One handoff: the prefix's tier split and both sides' random plan."""
    plan: pd.Plan
    tokens: tuple[int, ...]
    device_pages: int       # leading pages on prefill's device
    host_pages: int         # then pages on host only; the rest is in storage only
    decode_slots: int       # decode pool size (too small: decode aborts on allocation)
    faults: tuple[str, ...] = ()   # pd.FAULTS switches on for this case only

    def __post_init__(self) -> None:
        for name in ("device_pages", "host_pages", "decode_slots"):
            int_at_least(name, getattr(self, name), 0)
        unknown = [f for f in self.faults if f.startswith("_") or not isinstance(getattr(pd.Faults, f, None), bool)]
        if unknown:
            raise ValueError(f"faults: no fault switch {unknown[0]!r} in hicache.runtime.pd_handoff.Faults")

    def check_prefix(self, n_pages: int) -> None:
        """The tier split must fit the prefix: device_pages + host_pages <= its pages."""
        if self.device_pages + self.host_pages > n_pages:
            raise ValueError(f"device_pages + host_pages: {self.device_pages} + {self.host_pages} exceeds the "
                             f"prefix's {n_pages} pages")


class DistChannel:
    """pd.Channel over torch.distributed point-to-point ops to one peer."""

    def __init__(self, peer: int) -> None:
        import torch.distributed as dist
        self.dist = dist
        self.peer = peer
        self._works: list = []       # isends in flight (their tensors kept alive)

    def _isend(self, t: torch.Tensor) -> None:
        self._works = [(w, x) for w, x in self._works if not w.is_completed()]
        self._works.append((self.dist.isend(t, self.peer), t))

    def send(self, kind: int, page: int, clock: int) -> None:
        self._isend(torch.tensor([kind, page, clock], dtype=torch.int64))

    def recv(self) -> tuple[int, int, int]:
        t = torch.empty(3, dtype=torch.int64)
        self.dist.recv(t, src=self.peer)
        return int(t[0]), int(t[1]), int(t[2])

    def send_payload(self, data: torch.Tensor) -> None:
        self._isend(data.contiguous().clone())

    def recv_payload(self, out: torch.Tensor) -> None:
        self.dist.recv(out, src=self.peer)

    def close(self) -> None:
        for w, _ in self._works:
            w.wait()
        self._works = []


def _compute(cache, tokens: list[int], n_pages: int) -> None:
    """Serve tokens[:n_pages] from scratch: write the pages' KV, insert, back up to host."""
    ps = cache.cfg.page_size
    req = cache.match(tokens[:n_pages * ps])
    have = len(cache.prefix_pages(req))
    pages = cache.alloc(n_pages - have)
    nb = cache.device_pool.page_nbytes
    for i, p in enumerate(pages, start=have):
        cache.device_pool.write_page(p, stamp(tokens, i, nb, ps))
    cache.insert(req, pages)
    cache.backup(req.node)
    cache.finish(req)
    cache.drain()


class CacheSource:
    """The prefill engine's cached prefix: device, host and storage pages of a HiCache."""

    def __init__(self, case: Case, store_dir: str) -> None:
        from hicache.runtime.cache import HiCache
        from hicache.storage.file_store import FileStorage
        cfg = cache_config()
        tokens = list(case.tokens)
        n = len(tokens) // cfg.page_size
        case.check_prefix(n)
        d, h = case.device_pages, case.host_pages
        self.storage = FileStorage(store_dir)
        if d + h < n:            # another engine computed the whole prefix into storage
            with HiCache(cfg, storage=self.storage) as other:
                _compute(other, tokens, n)
        self.cache = cache = HiCache(cfg, storage=self.storage)
        if d:
            _compute(cache, tokens, d)
        if h:
            _compute(cache, tokens, d + h)
            pin = cache.match(tokens[:d * cfg.page_size])     # keep the device part on device
            cache.evict_device(cfg.device_pages)
            cache.finish(pin)
        self.req = cache.match(tokens)
        if (self.req.device_hit, len(cache.prefix_pages(self.req))) != (d, d):
            raise RuntimeError(f"prefill setup: device hit {self.req.device_hit}, expected {d}")
        self.n_pages = n
        self.tiers = ["device"] * d + ["host"] * h + ["storage"] * (n - d - h)

    def locked(self) -> bool:
        """The request still holds the lock on its prefix: the cache has neither finished nor
        aborted it (an empty device prefix locks only the root, whose counter never drops)."""
        return not self.req.done

    def load(self, on_step) -> None:
        """Load every page up to device (host first, then storage via host), waiting for each
        transfer's completion; `on_step(page, tier)` after each page's one-tier move."""
        cache, req = self.cache, self.req
        host = [i for i, t in enumerate(self.tiers) if t == "host"]
        stored = [i for i, t in enumerate(self.tiers) if t == "storage"]
        if host:
            op = cache.load_back(req)
            if op is None or not op.wait() or op.error is not None or len(op.pages) != len(host):
                raise RuntimeError("prefill: host load-back failed")
            self._moved(host, "device", on_step)
        if stored:
            if not cache.prefetch(req) or cache.finish_prefetch(req) != len(stored):
                raise RuntimeError("prefill: storage prefetch did not return every page")
            self._moved(stored, "host", on_step)
            op = cache.load_back(req, _tier="storage")
            if op is None or not op.wait() or op.error is not None:
                raise RuntimeError("prefill: storage load-back failed")
            self._moved(stored, "device", on_step)
        cache.poll()

    def _moved(self, pages: list[int], tier: str, on_step) -> None:
        for i in pages:
            self.tiers[i] = tier
            on_step(i, tier)

    def page_bytes(self, page: int) -> torch.Tensor:
        if self.tiers[page] != "device":      # not loaded: whatever the destination holds
            return torch.zeros(self.cache.device_pool.page_nbytes, dtype=torch.uint8)
        return self.cache.device_pool.read_page(self.cache.prefix_pages(self.req)[page])

    def release(self, aborted: bool) -> None:
        (self.cache.abort if aborted else self.cache.finish)(self.req)

    def leaks(self) -> dict[str, int]:
        """Locks still held, device pages neither free nor in the tree, host slots outside
        the free/tree/in-flight partition (all 0 when nothing leaked). Closes the cache."""
        cache = self.cache
        cache.drain()
        nodes = [x for x in cache.tree.nodes() if x is not cache.tree.root]
        locks = sum(1 for x in nodes if x.lock_ref)
        in_tree = sum(len(x.device) for x in nodes if x.device is not None)
        dev = cache.cfg.device_pages - cache.dev_alloc.free - in_tree
        free, tree, infl = cache.host_partition()
        host = cache.host.capacity - len(free | tree | infl)
        cache.close()
        return {"locks": locks, "device_pages": dev, "host_slots": host}


class DecodePool:
    """The decode engine's KV pages: a free list and one row of page bytes per page."""

    def __init__(self, slots: int, page_nbytes: int) -> None:
        self.alloc_ = PageAllocator(slots)
        self.capacity = slots
        self.data = torch.zeros((slots, page_nbytes), dtype=torch.uint8)
        self.owned: set[int] = set()
        self.writes_to_free = 0        # a copy landing in a free page (use-after-free)

    def owns(self, page: int) -> bool:
        return page in self.owned

    def free_count(self) -> int:
        return self.alloc_.free

    def alloc(self) -> int | None:
        got = self.alloc_.alloc(1)
        if got is None:
            return None
        self.owned.add(got[0])
        return got[0]

    def free(self, page: int) -> None:
        self.owned.remove(page)      # a double free raises
        self.alloc_.release([page])

    def buffer(self) -> torch.Tensor:
        return torch.empty(self.data.shape[1], dtype=torch.uint8)

    def write(self, page: int, buf: torch.Tensor) -> None:
        if page not in self.owned:
            self.writes_to_free += 1
        self.data[page] = buf

    def read(self, page: int) -> torch.Tensor:
        return self.data[page].clone()

    def leaks(self) -> dict[str, int]:
        return {"pages": self.capacity - self.alloc_.free, "owned": len(self.owned),
                "writes_to_free": self.writes_to_free}


def _events(log: pd.Log) -> dict:
    return {"init": log.init, "events": [(e.clock, e.side, e.action, e.page, e.info) for e in log.events]}


def pd_rank(rank: int, world: int, port: int, payload: dict[str, Any]) -> list[dict]:
    """Launcher entry: rank 0 serves as prefill, rank 1 as decode, one handoff per case."""
    import os

    import torch.distributed as dist
    if world != 2:
        raise ValueError(f"pd_rank: needs a world of 2 (prefill, decode), got {world}")
    timeout = timedelta(seconds=payload.get("timeout_s", 30))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timeout)
    # one process group per engine (their own collectives); the handoff uses the world's p2p
    engines = [dist.new_group([PREFILL], timeout=timeout), dist.new_group([DECODE], timeout=timeout)]
    out = []
    try:
        for k, case in enumerate(payload["cases"]):
            for name in case.faults:
                setattr(pd.FAULTS, name, True)
            chan = DistChannel(DECODE if rank == PREFILL else PREFILL)
            if rank == PREFILL:
                src = CacheSource(case, os.path.join(payload["store_dir"], f"case{k}"))
                ep = pd.PrefillEndpoint(chan, src, case.plan)
                outcome = ep.run()
                chan.close()
                out.append({"outcome": outcome, "log": _events(ep.log), "leaks": src.leaks()})
            else:
                pool = DecodePool(case.decode_slots, cache_config_page_nbytes())
                ep = pd.DecodeEndpoint(chan, pool, case.plan)
                outcome = ep.run()
                chan.close()
                reads = {p: b.numpy().tobytes() for p, b in ep.reads.items()}
                if outcome == "done":
                    ep.finish_request()      # the request ran on the handed-over pages
                out.append({"outcome": outcome, "log": _events(ep.log), "leaks": pool.leaks(), "reads": reads})
            for name in case.faults:
                setattr(pd.FAULTS, name, False)
            dist.barrier(group=engines[rank])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return out


def cache_config_page_nbytes() -> int:
    c = cache_config()
    itemsize = torch.empty((), dtype=getattr(torch, c.dtype)).element_size()
    return c.kv * c.layers * c.page_size * c.heads * c.head_dim * itemsize


def log_events(log: dict) -> list[pd.LogEvent]:
    return [pd.LogEvent(*r) for r in log["events"]]
