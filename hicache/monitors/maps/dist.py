"""Verified mode for one rank of the distributed engine (hicache.dist): the PPSync (loads,
backups), PrefixAgreement and CPSharding monitors behind the engine's listener.

    listener = monitored(events, verify)      # verified mode is decided here, once
    engine = Engine(cfg, comm, ..., listener=listener)
    attach(listener, engine)                  # the maps read the engine's objects

The launcher passes the parent's mode (`verify_config()`: `hicache.verified`'s when it was
imported, e.g. by `pytest --hicache-verify`, else HICACHE_VERIFY) to every rank. Off:
`monitored` returns the listener itself, so the engine runs exactly its own code. Sample mode also checks every
invariant at each cache check (after the rank's StageApply). A violation raises
ProtocolViolation on the emitting thread: the main thread (cache checks, inserts,
evictions), the prefetch threads (surfaced by the worker at its next pop or close), or a
copy thread (recorded by the CopyEngine and raised by the rank at its next cache check;
only a completion reported twice fails there).
"""
from __future__ import annotations

import dataclasses
import sys

from hicache.monitors.runtime import Mode, ProtocolViolation, VerifyConfig

from .steps import SequenceMonitor, Tee


def verify_config(**given) -> VerifyConfig:
    """The verified mode in force: `hicache.verified`'s when it was imported (it may have
    been enabled programmatically or by the pytest plugin), else HICACHE_VERIFY; the fields
    `given` (a command line's flags) over either, their variables not read. Importing
    `hicache.verified` here would switch verification on as a side effect."""
    mod = sys.modules.get("hicache.verified")
    if mod is not None:
        return dataclasses.replace(mod.current(), **given)
    return VerifyConfig.from_env(**given)


class EngineMonitors(Tee):
    """The engine's listener, then the monitors (bound by `attach` once the engine exists)."""

    __slots__ = ("cfg", "transfers", "queues", "pp", "prefix", "cp", "tripped")

    def __init__(self, inner, cfg: VerifyConfig):
        super().__init__(inner)
        self.cfg = cfg
        self.transfers: dict = {}     # tid -> Transfer, issued and not yet reported complete
        self.queues = None
        self.tripped: set = set()     # monitors that raised (not called again)

    def attach(self, engine) -> None:
        from .cp_sharding import CPShardingMap
        from .pp_sync import PPSyncMap
        from .prefix_agreement import PrefixAgreementMap
        topo, cfg = engine.topo, self.cfg
        self.queues = {"load": engine.loads, "backup": engine.backups}
        self.pp = [SequenceMonitor(PPSyncMap(rank=topo.rank, stage=topo.stage, cp=topo.cp, kind=k,
                                             transfer_of=self.transfers.get,
                                             downstream=topo.next_rank is not None), cfg)
                   for k in ("load", "backup")]
        self.prefix = SequenceMonitor(PrefixAgreementMap(rank=topo.rank, stage=topo.stage,
                                                         plans=lambda: engine.prefetch.plans), cfg)
        self.cp = SequenceMonitor(CPShardingMap(engine.tree), cfg)
        self.monitors = [*self.pp, self.prefix, self.cp]

    def __call__(self, event, fields) -> None:
        name = str(event)
        if name == "TransferIssue" and self.queues is not None:
            # just pushed: the queue's tail (PPSync resolves a completion whose event lags)
            q = self.queues[fields["kind"]]._q
            if q and q[-1].tid == fields["tid"]:
                self.transfers[fields["tid"]] = q[-1]
        self.inner(event, fields)
        for m in self.monitors:
            if m not in self.tripped:
                try:
                    m(event, fields)
                except ProtocolViolation:
                    # the first violation is the report; later steps of a broken run only echo it
                    self.tripped.add(m)
                    raise
        if name == "TransferComplete":
            self.transfers.pop(fields["tid"], None)
        elif name == "StageApply" and self.cfg.mode is Mode.SAMPLE:
            for m in self.monitors:
                if m not in self.tripped:
                    m.cache_check()


def monitored(listener, cfg: VerifyConfig | None = None):
    """`listener` with the engine monitors behind it when verified mode (`cfg`, default:
    the one in force here) is on, else the listener itself."""
    cfg = cfg or verify_config()
    return listener if cfg.mode is Mode.OFF else EngineMonitors(listener, cfg)


def summary(listener) -> dict | None:
    """Per monitor: events seen and steps checked (None when verification is off)."""
    if not isinstance(listener, EngineMonitors) or listener.queues is None:
        return None
    names = ("PPSync/load", "PPSync/backup", "PrefixAgreement", "CPSharding")
    return {n: {"steps": m.steps, "checked": m.checked} for n, m in zip(names, listener.monitors)}


def attach(listener, engine) -> None:
    """Bind the monitors of `monitored(...)` to the engine (no-op when verification is off)."""
    if isinstance(listener, EngineMonitors):
        listener.attach(engine)
