"""One rank of `hicache run` and of the multi-process tests: set up, agree, serve, report."""
from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field

from hicache.storage.faulty import FaultConfig, FaultyStorage
from hicache.storage.file_store import FileStorage

from .comm import Comm
from .engine import Engine, SeededBugs
from .gather_bench import bench_gather
from .topology import Topology
from .workload import make_workload


class EventCounter:
    """Listener counting events by vocabulary name (thread-safe)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, event, fields) -> None:
        with self._lock:
            self.counts[str(event)] += 1


class HungStorage(FileStorage):
    """A backend whose every call hangs for `stall_s` first (Faults.hung_storage_rank)."""

    def __init__(self, root: str, stall_s: float) -> None:
        super().__init__(root)
        self.stall_s = stall_s

    def _hang(self) -> None:
        threading.Event().wait(self.stall_s)    # emulated hang, never set

    def batch_exists(self, keys):
        self._hang()
        return super().batch_exists(keys)

    def batch_get(self, keys):
        self._hang()
        return super().batch_get(keys)

    def batch_get_sized(self, keys, nbytes):
        # (FileStorage's own sized read does not go through batch_get: hung as well)
        self._hang()
        return super().batch_get_sized(keys, nbytes)

    def batch_set(self, keys, values):
        self._hang()
        return super().batch_set(keys, values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """Injected process faults (tests): a rank that dies or stalls at a given cache check,
    and per-rank configuration overrides (to provoke a start-up mismatch)."""
    die_rank: int | None = None
    stall_rank: int | None = None
    diverge_rank: int | None = None      # mutates its replicated state behind the others' back
    no_wait_rank: int | None = None      # seeded bug: applies transfers without waiting (slow copies)
    local_counts_rank: int | None = None  # seeded bug 5: applies its own ready counts, not the agreed
    corrupt_ranks: tuple[int, ...] = ()  # seeded bug: these ranks write wrong bytes into their pages
    # a listener on these ranks' prefetch loader thread fails at its first batch: "raise"
    # (a monitor's error there) or "hang" (never returns within stall_s: a stuck monitor)
    loader_fault_ranks: tuple[int, ...] = ()
    loader_fault: str = "raise"
    # a listener on these ranks' copy threads fails when their first transfer completes:
    # "violation" (an AssertionError, as a monitor's ProtocolViolation) or "raise" (any other error)
    copy_fault_ranks: tuple[int, ...] = ()
    copy_fault: str = "violation"
    hung_storage_rank: int | None = None  # every storage call of this rank hangs for stall_s
    at_check: int = 3
    # a test's own bound (0: none): a rank still in its serve loop this many seconds after
    # the first pass raises, so a test of a fault that used to spin fails instead of hanging
    serve_limit_s: float = 0.0
    stall_s: float = 600.0
    overrides: dict[int, dict[str, object]] = field(default_factory=dict)

    def thread_listener(self, rank: int, inner):
        """`inner`, failing on this rank's prefetch loader thread as `loader_fault` says and
        on its copy threads as `copy_fault` says."""
        loader = rank in self.loader_fault_ranks
        copy = rank in self.copy_fault_ranks
        if not (loader or copy):
            return inner

        def listener(event, fields) -> None:
            thread = threading.current_thread().name
            if loader and str(event) == "RankLoadBatch" and thread.startswith("prefetch-load"):
                if self.loader_fault == "hang":
                    threading.Event().wait(self.stall_s)
                else:
                    raise RuntimeError(f"injected: a listener failed on rank {rank}'s loader thread")
            if copy and str(event) == "TransferComplete" and thread.startswith("copy-"):
                if self.copy_fault == "violation":
                    raise AssertionError(f"injected: a monitor's check failed on rank {rank}'s copy thread")
                raise RuntimeError(f"injected: a listener failed on rank {rank}'s copy thread")
            inner(event, fields)
        return listener

    def maybe_fire(self, rank: int, checks: int, engine: "Engine") -> None:
        if self.serve_limit_s:
            if time.monotonic() - engine.started_at > self.serve_limit_s:
                raise RuntimeError(f"test bound: rank {rank} still serving after {self.serve_limit_s:g} s "
                                   f"({checks} cache checks)")
        if checks != self.at_check:
            return
        if rank == self.diverge_rank:
            engine.tree.device.alloc_chain(0, 0, 1)   # a rank-local allocation: trees now differ
        if rank == self.die_rank:
            os._exit(17)
        if rank == self.stall_rank:
            threading.Event().wait(self.stall_s)   # a stalled rank: never reaches its next collective


def run_rank(rank: int, world: int, port: int, payload: tuple) -> dict:
    """payload: (RunConfig, Faults) or (RunConfig, Faults, gather-bench iterations[, the
    parent's VerifyConfig: spec monitors on this rank's protocols])."""
    import torch

    from hicache.monitors.maps.dist import attach as attach_monitors
    from hicache.monitors.maps.dist import monitored
    from hicache.monitors.maps.dist import summary as monitor_summary
    from hicache.monitors.maps.dist import verify_config
    torch.set_num_threads(1)   # ranks share few cores: intra-op threads only oversubscribe them
    cfg, faults, *rest = payload
    bench_iters = rest[0] if rest else 0
    verify = rest[1] if len(rest) > 1 else None
    if rank in faults.overrides:
        cfg = dataclasses.replace(cfg, **faults.overrides[rank])
    if rank == faults.no_wait_rank:       # slow copies make the missing wait observable
        cfg = dataclasses.replace(cfg, transfer_delay_s=0.3)
    bugs = SeededBugs(no_wait=rank == faults.no_wait_rank, corrupt_pages=rank in faults.corrupt_ranks,
                      local_counts=rank == faults.local_counts_rank)
    comm = Comm(rank, world, port, cfg.timeout_s)
    try:
        comm.check_config(cfg.fingerprint())    # before any group exists: mismatches fail cleanly
        if cfg.world != world:                  # agreed config, so every rank raises alike
            raise ValueError(f"configuration wants cp={cfg.cp} x pp={cfg.pp} = {cfg.world} ranks, "
                             f"launched with {world}")
        comm.build_groups(Topology(cp=cfg.cp, pp=cfg.pp, rank=rank))
        # Injected faults differ per rank (seeded by rank). The loader's reads fail at the
        # configured rate; exists/set calls of the scheduler at a third of it.
        fail = cfg.storage_fail_p
        inner = (HungStorage(cfg.storage_dir, faults.stall_s) if rank == faults.hung_storage_rank
                 else FileStorage(cfg.storage_dir))
        delay = dict(p_delay=0.5 if cfg.storage_delay_s > 0 else 0.0, max_delay_s=cfg.storage_delay_s)
        load_store = FaultyStorage(inner, FaultConfig(seed=cfg.seed * 1000 + rank, p_raise=fail / 2,
                                                      p_none=fail / 2, **delay))
        store = FaultyStorage(inner, FaultConfig(seed=cfg.seed * 1000 + 500 + rank, p_raise=fail / 6,
                                                 p_none=fail / 6, **delay))
        events = EventCounter()
        verify = verify or verify_config()    # verified mode (HICACHE_VERIFY): spec monitors
        listener = monitored(faults.thread_listener(rank, events), verify)
        engine = Engine(cfg, comm, store, load_store, listener=listener, bugs=bugs, verify=verify)
        attach_monitors(listener, engine)
        workload = make_workload(cfg.requests, cfg.page_size, cfg.model.vocab, cfg.seed, cfg.model.max_len)
        engine.serve(workload, faults)
        comm.barrier("finish")
        out = engine.report()
        if bench_iters:
            out["gather_bench"] = bench_gather(engine, iters=bench_iters)
        out["events"] = dict(events.counts)
        out["monitors"] = monitor_summary(listener)
        if out["monitors"] is not None:
            out["monitors"]["LayerPipeline"] = dict(engine.pipeline_checks)
        return out
    finally:
        comm.close()
