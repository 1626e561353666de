"""Dependent pools of speculative decoding: draft KV, indexer, recurrent state, SWA (DraftState).

A cache hit must restore not only the target model's KV but every pool the draft model
depends on; a missing draft restore silently collapses speculative acceptance (REFERENCE.md,
bug 13). A `DependentSet` registers these pools beside the target KV pool, each with a host
pool, and moves their bytes inside every transfer of the cache (backup, load-back, storage
backup, storage prefetch), so the transfer's completion covers all of them. The CP gather
(`hicache.dist.gather`) drives its own copies and records them through the public steps
(`launch`, `finish_draft`, `finish_target`, `fire`, `record_read`, `retire`, `abort`) as a
transfer of kind "gather".

Layouts (spec/DraftState.tla):
  PACKED   the pool's rows are tail layers of the target host pool and share its slot
           mapping; refused at configuration (ValueError with the reason) unless dtype, row
           bytes, KV planes and token indexing match the target's. Moved by
           `kernels.transfer_packed` in the target's own launches; per layer, the draft
           layers ride with the last target layer.
  SIDECAR  a separate host pool; its page lists are derived (`kernels.sidecar_pages`) from
           the lists of its declared source: the target KV, or the SWA pool.

Roles: DRAFT_KV, DRAFT_INDEXER (hit on all pages), DRAFT_STATE (recurrent state, hit on the
trailing pages only) are the spec's DraftPools; SWA is target-side state and the second index
source (spec `Sources = {"kv", "swa"}`): its copy is part of the target copy.

Per live transfer t the set keeps a `Transfer` record (the runtime state the DraftState
refinement map reads) and emits, on its own bus, TransferLaunch(t), DraftCopyFinish(t, p) for
a packed pool, TargetCopyFinish(t), DraftCopyFinish(t, p) per sidecar, CompletionFire(t); a
consumer reading a restored pool calls `read`, which waits on every load-back into its
request's prefix and emits BufferRead(t, p); TransferRetire(t) once no consumer can read t
(a backup, storage backup or prefetch as it fires; a load-back once applied and every request
holding it ended; a gather at its close), and the record goes; TransferAbort(t) instead when a
copy of t failed before it fired (its owner's failure path: `abort`). Invariant (fault switch off):
CompletionFire(t) is emitted, and the load's completion is signalled, only after every copy
of t finished.

A finish says what its copy did, not only that the step after it ran: every kernel launch
(or storage value split) adds to `Transfer.moved[pool]` the (page, layer) copies it was
handed for that pool, counted from the launch's own arguments, and each finish event carries
that count (`moved`). The refinement map counts a pool's copy as finished only when the count
equals what the transfer's page list requires of that pool, so a copy skipped, or launched
with fewer pages or without its packed rows, leaves the copy unfinished (the completion that
follows fails its check). Counting costs a dict update per launch; nothing re-reads bytes.

Backups and storage copy every page of every pool (a later, shorter hit needs the state at
its own last page); the hit policy selects what a load-back restores.
"""
from __future__ import annotations

import dataclasses
import enum
import threading
from typing import Any

from hicache.kernels import HitPolicy, IndexSource
from hicache.protocol.vocabulary import DraftState as D
from hicache.runtime.config import DTYPES, CacheConfig, KVKind
from hicache.runtime.events import EventBus
from hicache.runtime.verify_hook import attach_verified


class Role(enum.StrEnum):
    DRAFT_KV = "draft_kv"            # the draft model's KV (spec DraftPools)
    DRAFT_INDEXER = "draft_indexer"  # indexer buffers of sparse attention, all pages
    DRAFT_STATE = "draft_state"      # separately owned recurrent state, trailing pages
    SWA = "swa"                      # target-side sliding-window state; an index source


class PoolLayout(enum.StrEnum):
    PACKED = "packed"
    SIDECAR = "sidecar"


class Indexing(enum.StrEnum):
    TOKEN = "token"        # one row per token (KV-like)
    REQUEST = "request"    # state owned per request (recurrent state): not token-indexed


#: the roles of the spec's DraftPools (SWA is a source, copied with the target)
DRAFT_ROLES = (Role.DRAFT_KV, Role.DRAFT_INDEXER, Role.DRAFT_STATE)


class Faults:
    """Seeded-bug switches, off by default; each is read only on the cold path it affects.
    `skip_draft_restore`: a load-back or prefetch restores the target (and SWA) only and
    fires its completion anyway (the reference system's bug 13). It skips the copies only:
    the finish events still come, carrying the rows the copies moved (none)."""
    skip_draft_restore = False


FAULTS = Faults()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DependentSpec:
    """One dependent pool. Rows are `heads * head_dim` elements of `dtype` per KV plane."""
    role: Role
    layout: PoolLayout = PoolLayout.SIDECAR
    layers: int = 1
    kv_kind: KVKind = KVKind.MHA
    heads: int = 1
    head_dim: int = 8
    dtype: str = "float16"
    indexing: Indexing = Indexing.TOKEN
    source: IndexSource = IndexSource.TARGET_KV
    hit_policy: HitPolicy = HitPolicy.ALL_PAGES
    trailing: int = 1

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen)
        for name, cls in (("role", Role), ("layout", PoolLayout), ("kv_kind", KVKind),
                          ("indexing", Indexing), ("source", IndexSource), ("hit_policy", HitPolicy)):
            try:
                set_(name, cls(getattr(self, name)))
            except ValueError:
                raise ValueError(f"{name}: unknown value {getattr(self, name)!r}; expected one of "
                                 f"{[m.value for m in cls]}") from None
        for name in ("layers", "heads", "head_dim", "trailing"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name}: must be a positive int, got {v!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: unknown dtype {self.dtype!r}; expected one of {DTYPES}")
        if self.kv_kind is KVKind.MLA and self.heads != 1:
            raise ValueError(f"heads: MLA stores one latent head, got {self.heads}")
        if self.source is IndexSource.STATE:
            raise ValueError("source: a dependent pool derives from target_kv or swa, not state")
        if self.role is Role.SWA and self.source is not IndexSource.TARGET_KV:
            raise ValueError("source: the SWA pool derives its indices from target_kv")

    @property
    def name(self) -> str:
        return self.role.value


def packed_refusal(target: CacheConfig, spec: DependentSpec) -> str | None:
    """Why `spec` may not share the target's slot mapping (None: it may)."""
    checks = (
        (spec.dtype == target.dtype, f"dtype {spec.dtype} != target {target.dtype}"),
        (spec.kv_kind is target.kv_kind, f"kv_kind {spec.kv_kind} != target {target.kv_kind}"),
        (spec.heads * spec.head_dim == target.heads * target.head_dim,
         f"row {spec.heads}x{spec.head_dim} != target {target.heads}x{target.head_dim}"),
        (spec.indexing is Indexing.TOKEN, f"indexing {spec.indexing} is not per token"),
        (spec.source is IndexSource.TARGET_KV, f"source {spec.source} is not the target's slot mapping"),
        (spec.hit_policy is HitPolicy.ALL_PAGES, f"hit_policy {spec.hit_policy} selects a subset of pages"),
        (spec.role is not Role.SWA, "the SWA pool is an index source, kept beside the target"),
    )
    for ok, why in checks:
        if not ok:
            return why
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class DraftConfig:
    """The dependent pools of one engine, validated against the target's CacheConfig."""
    target: CacheConfig
    pools: tuple[DependentSpec, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools", tuple(self.pools))
        roles = [p.role for p in self.pools]
        if len(set(roles)) != len(roles):
            raise ValueError(f"pools: each role at most once, got {[r.value for r in roles]}")
        packed = [p for p in self.pools if p.layout is PoolLayout.PACKED]
        for i, p in enumerate(self.pools):
            if p.layout is PoolLayout.PACKED:
                why = packed_refusal(self.target, p)
                if why is not None:
                    raise ValueError(f"pools[{i}].layout: packed layout refused for {p.name}: {why}; "
                                     f"use a sidecar")
            if p.source is IndexSource.SWA and Role.SWA not in roles:
                raise ValueError(f"pools[{i}].source: {p.name} derives from swa but no SWA pool is registered")
        if len(packed) > 1:
            raise ValueError(f"pools: one packed pool per target (one packed segment per launch), "
                             f"got {[p.name for p in packed]}")

    @property
    def packed(self) -> DependentSpec | None:
        return next((p for p in self.pools if p.layout is PoolLayout.PACKED), None)

    @property
    def sidecars(self) -> tuple[DependentSpec, ...]:
        """Sidecar pools, SWA first (it is the source others may derive from)."""
        side = [p for p in self.pools if p.layout is PoolLayout.SIDECAR]
        return tuple(sorted(side, key=lambda p: p.role is not Role.SWA))

    def pool_config(self, spec: DependentSpec) -> CacheConfig:
        """The pool geometry of a sidecar (device and host pages as the target's)."""
        return dataclasses.replace(self.target, layers=spec.layers, heads=spec.heads,
                                   head_dim=spec.head_dim, kv_kind=spec.kv_kind, dtype=spec.dtype)

    def host_config(self) -> CacheConfig:
        """The target host pool's geometry: the packed pool's layers appended."""
        p = self.packed
        if p is None:
            return self.target
        return dataclasses.replace(self.target, layers=self.target.layers + p.layers)


class Kind(enum.StrEnum):
    BACKUP = "backup"          # device -> host
    LOAD = "load"              # host -> device (load-back)
    STORE = "store"            # host -> storage
    PREFETCH = "prefetch"      # storage -> host
    GATHER = "gather"          # CP all-gather of a device prefix (hicache.dist.gather)


#: transfers that restore a hit (the hit policies select what they move); the others copy
#: every page of every pool
RESTORES = frozenset({Kind.LOAD, Kind.GATHER})
#: transfers a consumer reads after their completion (`read`, the gather's `dependent`):
#: retired by their owner once nobody can read them; the others retire when they fire
READ_AFTER_FIRE = RESTORES


@dataclasses.dataclass(slots=True, eq=False)
class Transfer:
    """The DraftState view of one transfer (written by the thread that does the step)."""
    tid: int
    kind: Kind
    phase: str = "copying"                                  # "copying" | "fired"
    tgt_done: bool = False
    done: set = dataclasses.field(default_factory=set)      # draft roles whose copy finished
    read: set = dataclasses.field(default_factory=set)      # pools a consumer read
    read_stale: set = dataclasses.field(default_factory=set)
    src_idx: dict = dataclasses.field(default_factory=dict)   # "kv"/"swa" -> page tuple
    xfer_idx: dict = dataclasses.field(default_factory=dict)  # role -> source page tuple
    # pool ("target", "swa", a draft role) -> (page, layer) copies its launches were handed
    # for this transfer. Added to by the thread that drives the transfer, before the pool's
    # finish; set by the finish to the count it reports: None when the finish's caller did not
    # count (a public step called without `moved`). No copy adds to a pool after its finish.
    moved: dict[str, int | None] = dataclasses.field(default_factory=dict)
    # a prefetch: the values its fetch received (a prefix of its pages: the fetch stops at
    # the first miss), set by its finish; None for every other kind
    fetched: int | None = None
    # its owner said no consumer will read it any more (`retire`) before it fired: it
    # retires when it fires
    released: bool = False


def _count_arg(name: str, v: int | None) -> int | None:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return v
    raise ValueError(f"{name}: a count of (page, layer) copies, a non-negative int or None, got {v!r}")


class DependentSet:
    """The dependent pools of one HiCache, and the copies it adds to each transfer.

    Created by the user, handed to `HiCache(..., deps=...)`, which calls `attach` once and
    `close` when it closes. `bus` carries the DraftState events (separate from the HostTier
    bus: one protocol per bus, so each monitor sees only its own steps)."""

    def __init__(self, cfg: DraftConfig, bus: EventBus | None = None) -> None:
        self.cfg = cfg
        self.bus = bus or EventBus()
        self.device: dict[Role, Any] = {}     # role -> DevicePool
        self.host: dict[Role, Any] = {}       # sidecar role -> HostPool
        self.transfers: dict[int, Transfer] = {}
        self._tid = 0
        # one step = the record's update and its event, atomic against the other transfer
        # threads: a monitor mapping `transfers` inside the event sees exactly this step
        self._lock = threading.RLock()
        self.cache = None
        self._closed = False
        # verified mode, as HiCache.__init__ (verify_hook): the DraftState monitor attached
        # here, before any transfer
        self._verified = attach_verified(self)

    def close(self) -> None:
        """The set's end of use: called by its HiCache's `close` once every transfer is
        applied (a set driven without a cache, by the CP gather, is closed by its caller).
        Copies nothing; in verified mode from the environment, the monitor's final check.
        Idempotent (the check runs at the first close)."""
        if self._closed:
            return
        self._closed = True
        if self._verified:
            from hicache.monitors.attach import final_check
            final_check(self)

    # ------------------------------------------------------------------ pools
    def attach(self, cache) -> None:
        """Build the pools beside `cache`'s (the target host pool is built by `host_pool`)."""
        if cache.cfg != self.cfg.target:
            raise ValueError("deps: DraftConfig.target differs from the cache's CacheConfig")
        if self.cache is not None and self.cache is not cache:
            # its pools would follow the second cache's transfers while the first one's
            # copies read and write them: restores of the wrong bytes, with no error
            raise ValueError("deps: this DependentSet is already attached to another HiCache "
                             "(one DependentSet per cache)")
        self.cache = cache
        if cache.device_pool is None:
            return
        from hicache.runtime.pools import DevicePool, HostPool
        for spec in self.cfg.pools:
            pc = self.cfg.pool_config(spec)
            self.device[spec.role] = DevicePool(pc, device=cache.device_pool.buf.device)
            if spec.layout is PoolLayout.SIDECAR and cache.host is not None:
                self.host[spec.role] = HostPool(pc)

    def host_pool(self):
        """The target's host pool: with a packed pool, its layers are the tail layers."""
        from hicache.runtime.pools import HostPool
        return HostPool(self.cfg.host_config())

    @property
    def has_bytes(self) -> bool:
        return bool(self.device)

    # ------------------------------------------------------------------ events
    def _emit(self, action: D, **args: Any) -> None:
        bus = self.bus
        if bus.listeners:
            bus.publish(action, args)

    def launch(self, kind: Kind, src_pages: list[int], dst_pages: list[int]) -> int:
        """TransferLaunch: record the transfer and the page lists each source hands out."""
        try:
            kind = Kind(kind)
        except ValueError:
            raise ValueError(f"kind: {kind!r} is not one of {', '.join(k.value for k in Kind)}") from None
        with self._lock:
            self._tid += 1
            return self._launch(self._tid, kind, dst_pages)

    def _launch(self, tid: int, kind: Kind, dst_pages: list[int]) -> int:
        rec = Transfer(tid, kind)
        kv = tuple(dst_pages)
        swa = tuple(self._derive(self._spec(Role.SWA), kv, restore=kind in RESTORES)) \
            if self._spec(Role.SWA) else kv
        rec.src_idx = {"kv": kv, "swa": swa}
        for spec in self.cfg.pools:
            if spec.role is not Role.SWA:
                rec.xfer_idx[spec.role.value] = swa if spec.source is IndexSource.SWA else kv
        self.transfers[tid] = rec
        self._emit(D.TransferLaunch, t=tid, kind=kind.value)
        return tid

    def _spec(self, role: Role) -> DependentSpec | None:
        return next((p for p in self.cfg.pools if p.role is role), None)

    def _derive(self, spec: DependentSpec, source: tuple | list, restore: bool) -> list[int]:
        """The pool's pages for a transfer whose source pool moves `source` (sequence order):
        a restore selects by the hit policy; a backup copies every page."""
        if not restore or spec.hit_policy is HitPolicy.ALL_PAGES:
            return list(source)
        return list(source)[max(0, len(source) - spec.trailing):]

    # public steps, for transfers driven outside the cache (the CP gather): by transfer id
    def _live(self, tid: int, step: str) -> Transfer:
        """Transfer `tid`, still copying (a step of a fired or unknown transfer is the
        caller's bug: a completion fires once)."""
        rec = self.transfers.get(tid)
        if rec is None or rec.phase == "fired":
            what = "no live transfer (never launched, or fired already)" if rec is None else \
                "a transfer whose completion fired already"
            raise ValueError(f"tid: {step}({tid!r}) of {what}")
        return rec

    def finish_draft(self, tid: int, role: Role, moved: int | None = None) -> None:
        """DraftCopyFinish(tid, role). `moved`: the (page, layer) copies the caller's copy of
        the pool was handed; None: not counted (the monitor then takes the finish as the
        whole copy)."""
        rec = self._live(tid, "finish_draft")
        self._finish_draft(rec, self._role(role), _count_arg("moved", moved))

    def finish_target(self, tid: int, moved: int | None = None, moved_swa: int | None = None) -> None:
        """TargetCopyFinish(tid) (the target's copy, SWA included); `moved`, `moved_swa`: the
        (page, layer) copies of the target and of the SWA pool, as `finish_draft`'s."""
        rec = self._live(tid, "finish_target")
        self._finish_target(rec, _count_arg("moved", moved), _count_arg("moved_swa", moved_swa))

    def fire(self, tid: int) -> None:
        """CompletionFire(tid): call only after every copy of the transfer finished."""
        self._fire(self._live(tid, "fire"))

    def _role(self, role: Role | str) -> Role:
        """`role` as a registered dependent pool's role (named errors, not KeyError)."""
        try:
            role = Role(role)
        except ValueError:
            raise ValueError(f"role: {role!r} is not one of {', '.join(r.value for r in Role)}") from None
        if self._spec(role) is None:
            raise ValueError(f"role: no {role.value} pool is registered "
                             f"(registered: {', '.join(p.role.value for p in self.cfg.pools) or 'none'})")
        return role

    def record_read(self, tid: int | None, name: str) -> None:
        """BufferRead(tid, name) on a pool's first read after transfer tid (name "target"
        for the target or SWA); a read of a pool whose copy had not finished is recorded
        as stale."""
        rec = self.transfers.get(tid) if tid is not None else None
        if rec is None or name in rec.read:
            return
        with self._lock:
            rec.read.add(name)
            copied = rec.done | ({"target"} if rec.tgt_done else set())
            if name not in copied:
                rec.read_stale.add(name)
            self._emit(D.BufferRead, t=rec.tid, p=name)

    def _finish_draft(self, rec: Transfer, role: Role, moved: int | None) -> None:
        with self._lock:
            rec.moved[role.value] = moved
            rec.done.add(role.value)
            self._emit(D.DraftCopyFinish, t=rec.tid, p=role.value, moved=moved)

    def _finish_target(self, rec: Transfer, moved: int | None, moved_swa: int | None) -> None:
        with self._lock:
            rec.moved["target"] = moved
            if self._spec(Role.SWA) is not None:
                rec.moved["swa"] = moved_swa
            rec.tgt_done = True
            self._emit(D.TargetCopyFinish, t=rec.tid, moved=moved, moved_swa=moved_swa)

    def _finish_counted(self, rec: Transfer, role: Role) -> None:
        """DraftCopyFinish of a copy this set drove: with the count its launches added."""
        self._finish_draft(rec, role, rec.moved.get(role.value, 0))

    def _finish_target_counted(self, rec: Transfer) -> None:
        moved = rec.moved
        self._finish_target(rec, moved.get("target", 0),
                            moved.get("swa", 0) if self._spec(Role.SWA) is not None else None)

    def _fire(self, rec: Transfer) -> None:
        with self._lock:
            rec.phase = "fired"
            self._emit(D.CompletionFire, t=rec.tid)
            if not self.bus.listeners:
                self.transfers.pop(rec.tid, None)   # nobody maps it: keep no history
            elif rec.released or rec.kind not in READ_AFTER_FIRE:
                self._retire(rec)

    def retire(self, tid: int | None) -> None:
        """TransferRetire(tid): no consumer will read transfer tid any more (a load-back
        whose requests all ended, a closed gather). A fired transfer leaves the set's
        records now; one still copying when it fires. Without this a monitored set would
        keep every transfer it ever made, and its monitor would map them all at each step.
        Unknown or already retired tids are ignored (the owner may retire on every path)."""
        self._end(tid, failed=False)

    def abort(self, tid: int | None) -> None:
        """TransferAbort(tid): a copy of transfer tid failed, so it will never fire; its
        owner ends it (its consumers get the copy's error, never its buffers). A copying
        transfer leaves the set's records now, its slot idle; one that fired already (the
        failure came after its completion) retires as `retire` would. Without this every
        failed copy of a long canary (a storage or copy error, counted and survived) would
        keep its record, and the monitor's window its slot, for the rest of the run.
        Unknown, already ended tids are ignored. Call only once the transfer's copies have
        stopped: a copy step after it finds no live transfer."""
        self._end(tid, failed=True)

    def _end(self, tid: int | None, failed: bool) -> None:
        """Its owner is done with transfer tid: a fired one retires; a copying one is
        aborted when its copy failed, else marked to retire when it fires."""
        if tid is None:
            return
        with self._lock:
            rec = self.transfers.get(tid)
            if rec is None:
                return
            if rec.phase == "fired":
                self._retire(rec)
            elif failed:
                self._emit(D.TransferAbort, t=tid)     # (the event first, as _retire's)
                del self.transfers[tid]
            else:
                rec.released = True

    def _retire(self, rec: Transfer) -> None:
        # (under the lock) the event first: a monitor may check the transfer's last state
        # in it (sample mode checks every retire). A read after this finds no record and
        # records nothing (`read` refuses an ended request; a closed gather reads its own output)
        self._emit(D.TransferRetire, t=rec.tid)
        del self.transfers[rec.tid]

    # ------------------------------------------------------------------ copies
    def _sidecar_lists(self, spec: DependentSpec, src: list[int], dst: list[int],
                       restore: bool) -> tuple[list[int], list[int]]:
        """(src, dst) page lists of a sidecar, derived from its source's lists."""
        if spec.source is IndexSource.SWA:
            swa = self._spec(Role.SWA)
            src, dst = self._derive(swa, src, restore), self._derive(swa, dst, restore)
        return self._derive(spec, src, restore), self._derive(spec, dst, restore)

    @staticmethod
    def _count(rec: Transfer | None, pool: str, copies: int) -> None:
        """Add `copies` (page, layer) copies handed to a launch of `pool` for transfer rec."""
        if rec is not None:
            moved = rec.moved
            moved[pool] = moved.get(pool, 0) + copies

    def copy_all(self, tid: int, to_host: bool, dev_pages: list[int], host_slots: list[int]) -> None:
        """Every page of every pool, target included, then the completion (a backup:
        to_host=True). Runs on the writer thread, or on the scheduler for a synchronous
        write-back."""
        rec = self.transfers.get(tid)
        cache = self.cache
        if cache.device_pool is not None:
            if self.cfg.packed is not None:
                self._packed(rec, None, to_host, dev_pages, host_slots)
            else:
                self._copy_target(rec, None, to_host, dev_pages, host_slots)
        self._after_target(rec, to_host, dev_pages, host_slots, restore=False)

    def _copy_target(self, rec: Transfer | None, layer: int | None, to_host: bool, dev_pages,
                     host_slots) -> None:
        """The target's rows alone (layer None: every target layer), counted as "target"."""
        from hicache.runtime.copy import copy_layer
        cache = self.cache
        dev, host = cache.device_pool, cache.host_pool
        if to_host:
            copy_layer(host, host_slots, dev, dev_pages, layer)
        else:
            copy_layer(dev, dev_pages, host, host_slots, layer)
        self._count(rec, "target", len(dev_pages) * (dev.cfg.layers if layer is None else 1))

    def _packed(self, rec: Transfer | None, layer: int | None, to_host: bool, dev_pages, host_slots) -> None:
        """One `transfer_packed` launch, counted from what it was handed: the target's rows of
        `layer` (None: every layer) and, in the same launch, every draft layer when `layer` is
        None or the target's last (the kernel's contract)."""
        import torch

        from hicache import kernels
        cache = self.cache
        spec = self.cfg.packed
        t, _ = cache.device_pool.kernel_view()
        d, _ = self.device[spec.role].kernel_view()
        h, layout = cache.host_pool.kernel_view()
        kernels.transfer_packed(t, d, h, torch.as_tensor(dev_pages, dtype=torch.int64),
                                torch.as_tensor(host_slots, dtype=torch.int64),
                                direction="to_host" if to_host else "to_device",
                                page_size=cache.cfg.page_size, host_layout=layout.value, layer=layer)
        n, lt = len(dev_pages), cache.cfg.layers
        self._count(rec, "target", n * (lt if layer is None else 1))
        if layer is None or layer == lt - 1:
            self._count(rec, spec.role.value, n * spec.layers)

    def _after_target(self, rec: Transfer | None, to_host: bool, dev_pages, host_slots,
                      restore: bool, skip_draft: bool = False) -> None:
        """The target's copy (and the packed rows) is done: SWA, the sidecars, the completion.
        Each finish carries its pool's count (a copy the fault skipped: none)."""
        packed = self.cfg.packed
        if rec is not None and packed is not None:
            self._finish_counted(rec, packed.role)
        for spec in self.cfg.sidecars:
            if spec.role is not Role.SWA:
                continue
            self._copy_sidecar(rec, spec, to_host, dev_pages, host_slots, restore)
        if rec is not None:
            self._finish_target_counted(rec)
        for spec in self.cfg.sidecars:
            if spec.role is Role.SWA:
                continue
            if not skip_draft:
                self._copy_sidecar(rec, spec, to_host, dev_pages, host_slots, restore)
            if rec is not None:
                self._finish_counted(rec, spec.role)
        if rec is not None:
            self._fire(rec)

    def _copy_sidecar(self, rec: Transfer | None, spec: DependentSpec, to_host: bool, dev_pages,
                      host_slots, restore: bool) -> None:
        """One launch of a sidecar's pages, every layer, counted from its page list."""
        if spec.role not in self.host:
            return
        from hicache.runtime.copy import copy_pages
        dev, host = self.device[spec.role], self.host[spec.role]
        d, h = self._sidecar_lists(spec, dev_pages, host_slots, restore)
        if to_host:
            copy_pages(host, h, dev, d)
        else:
            copy_pages(dev, d, host, h)
        self._count(rec, spec.role.value, len(d) * spec.layers)

    def load_layer_fn(self, op):
        """The per-layer copy of a load-back: target layer l; with the last layer the packed
        draft layers (same launch), SWA, the sidecars and the completion, all before the
        load's last layer is signalled (LoadOp sets layers_done after this returns)."""
        cache = self.cache
        last = cache.cfg.layers - 1
        rec = self.transfers.get(op.draft_tid)
        packed = self.cfg.packed

        def copy(layer: int) -> None:
            skip = FAULTS.skip_draft_restore
            if cache.device_pool is not None:
                if packed is not None and not skip:
                    self._packed(rec, layer, False, op.pages, op.slots)
                else:
                    self._copy_target(rec, layer, False, op.pages, op.slots)
            if layer == last:
                self._after_target(rec, False, op.pages, op.slots, restore=True, skip_draft=skip)
        return copy

    # ------------------------------------------------------------------ storage values
    def value_nbytes(self) -> int:
        """Bytes of one page's storage value: target host page (packed rows included), then
        each sidecar's page, in `cfg.sidecars` order."""
        cache = self.cache
        return cache.host_pool.page_nbytes + sum(self.host[s.role].page_nbytes for s in self.cfg.sidecars
                                                 if s.role in self.host)

    def read_value(self, slot: int, tid: int | None = None):
        """One page's storage value (a storage backup's read of host slot `slot`, counted for
        transfer `tid`)."""
        import torch
        cache = self.cache
        rec = self.transfers.get(tid) if tid is not None else None
        parts = [cache.host_pool.read_page(slot)]
        self._count_host_page(rec, True)
        for s in self.cfg.sidecars:
            if s.role in self.host:
                parts.append(self.host[s.role].read_page(slot))
                self._count(rec, s.role.value, s.layers)
        return torch.cat(parts)

    def _count_host_page(self, rec: Transfer | None, with_packed: bool) -> None:
        """One target host page moved whole (packed rows included when `with_packed`)."""
        self._count(rec, "target", self.cfg.target.layers)
        packed = self.cfg.packed
        if packed is not None and with_packed:
            self._count(rec, packed.role.value, packed.layers)

    def write_value(self, slot: int, value, tid: int | None = None) -> None:
        """Split one storage value into the host pools (the fault skips the draft parts),
        counted for transfer `tid` (a prefetch)."""
        cache = self.cache
        skip = FAULTS.skip_draft_restore
        rec = self.transfers.get(tid) if tid is not None else None
        hp = cache.host_pool
        n = hp.page_nbytes
        if skip and self.cfg.packed is not None:
            c = hp.cfg
            src = value[:n].reshape(c.kv, c.layers, c.page_size, -1)
            for layer in range(self.cfg.target.layers):
                hp.layer_view(layer)[:, slot] = src[:, layer]
        else:
            hp.write_page(slot, value[:n])
        self._count_host_page(rec, not skip)
        off = n
        for s in self.cfg.sidecars:
            if s.role not in self.host:
                continue
            pool = self.host[s.role]
            m = pool.page_nbytes
            if not (skip and s.role is not Role.SWA):
                pool.write_page(slot, value[off:off + m])
                self._count(rec, s.role.value, s.layers)
            off += m

    def finish_storage(self, tid: int | None, fetched: int | None = None) -> None:
        """The storage transfer's pages are all written (or read): its completion, each
        finish with its pool's count. `fetched`: a prefetch's values received."""
        rec = self.transfers.get(tid) if tid is not None else None
        if rec is None:
            return
        if rec.kind is Kind.PREFETCH:
            # (what a prefetch's pools must have moved is the prefix it received: without the
            # count every counted finish would be judged short, a false alarm)
            if fetched is None:
                raise ValueError("fetched: a prefetch's finish needs the count of values it received")
            rec.fetched = fetched
        packed = self.cfg.packed
        if packed is not None:
            self._finish_counted(rec, packed.role)
        self._finish_target_counted(rec)
        for s in self.cfg.sidecars:
            if s.role is not Role.SWA:
                self._finish_counted(rec, s.role)
        self._fire(rec)

    # ------------------------------------------------------------------ consumers
    def pages_of(self, role: Role | str, pages: list[int]) -> list[int]:
        """The pool's restored pages of a prefix whose target pages are `pages`."""
        spec = self._spec(self._role(role))
        if spec.source is IndexSource.SWA:
            pages = self._derive(self._spec(Role.SWA), pages, True)
        return self._derive(spec, pages, True)

    def read(self, req, role: Role | str | None) -> list:
        """BufferRead: wait on the completion of every load-back into req's prefix (those
        another request started after req matched included), then read the pool's bytes of
        req's prefix (role None: the target KV). One CPU uint8 tensor per page, canonical
        order (kv, layer, token, row). An ended request is refused."""
        cache = self.cache
        if cache is None:
            raise ValueError("deps: not attached to a HiCache (pass it as HiCache(..., deps=...))")
        if role is not None:
            role = self._role(role)
        if cache.device_pool is None:
            raise ValueError("deps: a metadata-only cache holds no bytes to read")
        if req.done:
            # its lock is gone (its pages may be evicted and reused) and its load-backs
            # were retired: there is nothing of its own left to read
            raise ValueError(f"req: request {req.rid} has ended (read before cache.finish/abort)")
        # SWA is target-side state: reading it is a read of the spec's "target" buffer
        name = "target" if role is None or role is Role.SWA else role.value
        from hicache.runtime.cache import raise_check_failure
        # prefix_pages joins every load-back into the prefix to req.loads, those another
        # request started after req matched too (waiting on req.loads before that join read
        # their pages before their bytes landed); the pages are taken once every load joined
        # was waited on, so a load that failed meanwhile ends the prefix before its nodes
        # (its pages were never written). Two rounds at most: loads start on the scheduler's
        # thread, the caller's, so none starts while this one waits
        waited: set = set()
        while True:
            pages = cache.prefix_pages(req)
            fresh = [op for op in req.loads if op not in waited]
            if not fresh:
                break
            for op in fresh:
                waited.add(op)
                op.wait()                  # the completion event (fires after every copy)
                raise_check_failure(op)    # (a violation of the copies: not bytes to hand out)
                if op.error is None:       # (a failed load fired nothing: it is no read)
                    self.record_read(getattr(op, "draft_tid", None), name)
        if role is None:
            return [cache.device_pool.read_page(p) for p in pages]
        pool = self.device[role]
        return [pool.read_page(p) for p in self.pages_of(role, pages)]
