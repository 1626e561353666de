"""Per-layer gather of a CP-sharded cached prefix into two alternating scratch slots.

For layer l the ranks all-gather the prefix pages they own into slot l % 2. A rank enters
the collective of layer l only after it restored layer l (its load-back event), and its part
carries how many layers it had restored when it sent (an 8-byte header before its pages):
when the collective returns, each rank knows every rank restored l (the happens-before from
the other ranks' restores to this rank's read of their pages), and only then does it write
slot l % 2 (GatherStart). Attention on layer l waits for the slot's ready event; the gather
of l+2 reuses the slot only after attention on l released it. With overlap on, a gather
thread runs ahead (gather of l+1 while layer l computes); with overlap off the main thread
gathers right before attention.

Transitions are checked by hicache.protocol.layer_pipeline.LayerPipelineGuard (this rank's
own order, and the other ranks' restores as their headers reported them). Each step's event
(spec/LayerPipeline.tla's actions; fields `rank`, `cp_rank`, `layer`) is emitted after its
guard transition, under the same lock, so a listener sees the steps in the order the guard
took them. In verified mode (`verify`) a LayerPipeline monitor over this rank's guard
(`hicache.monitors.maps.layer_pipeline.RankLayerPipelineMap`) checks every step (in sample
mode, each gather's monitor draws its sampled steps from its own seed, `monitor_seed`).

After each layer's collective every rank also applies `late_ranks` to all the headers, its
own included, right after its GatherStart step: a rank whose header says it had not restored
the layer fails there on every rank alike (on the others their guard already refused the
GatherStart), so no rank goes on into the next layer's collective while another has stopped.

Dependent pools (speculative decoding: draft KV, indexer, recurrent state, SWA; spec
DraftState) ride with the gather of the last layer: each rank packs its owned pages of each
pool's selection (`DependentSet.pages_of`: the pool's hit policy, derived from its declared
source) and one all-gather per pool assembles them in prefix order. Order, as a DraftState
transfer of kind "gather": TransferLaunch at start; the packed pool (same slot mapping as the
target), then DraftCopyFinish; SWA (target-side state); TargetCopyFinish; each sidecar draft
pool, then DraftCopyFinish; CompletionFire. Only then is the last layer's ready event (and
`done`) set, so attention on the last layer and every `dependent(role)` consumer wait for
all of them. Dependent pools are indexed like the target's (owner rank and local page of
the logical page).
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.distributed as dist

from hicache.kernels import gather_pages
from hicache.protocol.cp_layout import CPLayout
from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.layer_pipeline import IllegalTransition, LayerPipelineGuard, late_ranks, slot_of
from hicache.protocol.vocabulary import LayerPipeline

from .comm import Comm
from .errors import LocalTimeout


class GatherFaults:
    """Seeded-bug switches (off by default).
    `skip_dependent_gather`: the gather moves the target (and SWA) only and fires its
    completion anyway (the CP form of the reference system's bug 13).
    `gather_before_restore`: (cp rank, layer): that rank's gather of that layer does not wait
    for its own restore: it sends what its pool holds and records the restore only after it
    wrote its slot, so the gather runs when only the other ranks restored the layer (the
    reference system's bug 11 with ranks as processes; read when a gather is built)."""
    skip_dependent_gather = False
    gather_before_restore: tuple[int, int] | None = None


FAULTS = GatherFaults()

#: bytes before a rank's pages in its part of a layer's gather: an int64, the number of
#: layers that rank had restored when it sent
HEADER = 8

_MASK64 = (1 << 64) - 1
#: gathers this process has built (`monitor_seed`'s index)
_GATHERS = itertools.count()


def monitor_seed(seed: int, rank: int, index: int) -> int:
    """The sample-mode seed of the monitor of this process's `index`-th gather on `rank`,
    from the configured `seed`: deterministic (plain arithmetic, not the salted `hash()`),
    and distinct per gather, so successive gathers sample different steps (one seed for all
    would check the same positions of every gather, possibly none of them)."""
    x = (seed * 0x9E3779B97F4A7C15 + rank * 0xD1B54A32D192ED03 + index * 0xBF58476D1CE4E5B9) & _MASK64
    # splitmix64's finaliser: nearby inputs give unrelated seeds
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class _RestoreBlindGuard(LayerPipelineGuard):
    """The guard of `GatherFaults.gather_before_restore`'s rank: its GatherStart does not
    require this rank's own restore (every other condition still holds it)."""

    def gather_start(self, layer: int) -> None:
        if layer in self.restored:
            return super().gather_start(layer)
        self.restored.add(layer)
        try:
            super().gather_start(layer)
        finally:
            self.restored.discard(layer)      # the restore is recorded when it happens


class _DepPlan:
    """One dependent pool's gather: its selection of prefix pages and the pack/unpack ids."""
    __slots__ = ("role", "packed", "swa", "pool", "selected", "width", "pack_ids", "unpack_ids")

    def __init__(self, spec, pool: torch.Tensor, selected: list[int], layout: CPLayout, me: int) -> None:
        from hicache.runtime.draft import PoolLayout, Role
        self.role, self.pool, self.selected = spec.role, pool, selected
        self.packed = spec.layout is PoolLayout.PACKED
        self.swa = spec.role is Role.SWA
        owned = [[k for k, p in enumerate(selected) if layout.page_owner(p) == r] for r in range(layout.cp_size)]
        self.width = max((len(o) for o in owned), default=0)
        self.pack_ids = torch.tensor([layout.local_page(selected[k]) for k in owned[me]], dtype=torch.long)
        where = {k: r * self.width + j for r, o in enumerate(owned) for j, k in enumerate(o)}
        self.unpack_ids = torch.tensor([where[k] for k in range(len(selected))], dtype=torch.long)


class GatherStats:
    """Accumulated per-layer gather cost and the time attention spent waiting for it."""
    __slots__ = ("layers", "gather_s", "wait_s")

    def __init__(self) -> None:
        self.layers, self.gather_s, self.wait_s = 0, 0.0, 0.0

    def overlap_fraction(self) -> float:
        """Share of gather time hidden behind compute (0: none, 1: all)."""
        if self.gather_s <= 0:
            return 0.0
        return max(0.0, min(1.0, 1.0 - self.wait_s / self.gather_s))

    def as_dict(self) -> dict[str, float]:
        per = self.gather_s / self.layers if self.layers else 0.0
        return {"layers": self.layers, "gather_s": round(self.gather_s, 6), "wait_s": round(self.wait_s, 6),
                "per_layer_gather_ms": round(per * 1e3, 4), "overlap_fraction": round(self.overlap_fraction(), 4)}


class PrefixGather:
    """One forward pass's gathers. Use: start(); for l: buf = acquire(l) ... release(l); close()."""

    def __init__(self, comm: Comm, layout: CPLayout, device_pool: torch.Tensor, pages: Sequence[int],
                 restore_wait: Callable[[int], bool], *, overlap: bool, timeout_s: float, stats: GatherStats,
                 listener: Listener = NULL_LISTENER, deps=None,
                 dep_pools: Mapping | None = None, verify=None) -> None:
        """`deps`: a `hicache.runtime.draft.DependentSet` (the pools' declarations and the
        DraftState ledger and bus) and `dep_pools`: role -> this rank's device pool of that
        role, [layers, local pages, *page shape]; every declared pool must have one.
        `verify`: a `hicache.monitors.runtime.VerifyConfig`; unless off, a LayerPipeline
        monitor (`self.monitor`) checks this rank's steps behind `listener` and raises
        ProtocolViolation on the step that breaks the spec."""
        self.comm, self.layout, self.pool, self.pages = comm, layout, device_pool, list(pages)
        self.restore_wait, self.overlap, self.timeout_s = restore_wait, overlap, timeout_s
        self.stats, self.listener = stats, listener
        self.num_layers = device_pool.shape[0]
        n = layout.cp_size
        self._owned = [[i for i, p in enumerate(self.pages) if layout.page_owner(p) == r] for r in range(n)]
        self._width = max((len(o) for o in self._owned), default=0)
        me = self._me = comm.topo.cp_rank
        # Rows of the kernels' page view: a page is page_size consecutive rows.
        self._row = (device_pool[0, 0].numel() // layout.page_size,)
        self._page_bytes = device_pool[0, 0].numel() * device_pool.element_size()
        self._pack_ids = torch.tensor([layout.local_page(self.pages[i]) for i in self._owned[me]], dtype=torch.long)
        where = {i: r * self._width + j for r, owned in enumerate(self._owned) for j, i in enumerate(owned)}
        self._unpack_ids = torch.tensor([where[i] for i in range(len(self.pages))], dtype=torch.long)
        page_shape = device_pool.shape[2:]
        self._slots = [torch.zeros(len(self.pages), *page_shape, dtype=device_pool.dtype) for _ in range(2)]
        self._ready = [threading.Event() for _ in range(self.num_layers)]
        self._free = [threading.Event() for _ in range(2)]
        for ev in self._free:
            ev.set()
        blind = FAULTS.gather_before_restore
        self._blind_layer = blind[1] if blind is not None and blind[0] == me else None
        guard = LayerPipelineGuard if self._blind_layer is None else _RestoreBlindGuard
        self._guard = guard(self.num_layers, peers={r: 0 for r in range(n) if r != me})
        # guards the guard, and orders each transition with its event (see `_step`)
        self._lock = threading.Lock()
        self.monitor = None
        if verify is not None and verify.mode != "off":
            from hicache.monitors.maps.layer_pipeline import RankLayerPipelineMap
            from hicache.monitors.maps.steps import Tee
            from hicache.monitors.runtime import Monitor
            verify = dataclasses.replace(verify, seed=monitor_seed(verify.seed, comm.rank, next(_GATHERS)))
            self.monitor = Monitor(RankLayerPipelineMap(self._guard, me, n), verify)
            self.listener = listener = Tee(listener, [self.monitor])
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        # dependent pools: gathered with the last layer; `done` fires after all of them
        self.deps = deps
        self._done = threading.Event()
        self._dep_out: dict = {}
        self._tid: int | None = None
        self._target_moved = 0      # (page, layer) copies of the target's prefix written so far
        self._dep_plans: list[_DepPlan] = []
        if deps is not None:
            pools = dict(dep_pools or {})
            missing = [s.role.value for s in deps.cfg.pools if s.role not in pools]
            if missing:
                raise ValueError(f"dep_pools: no device pool for {missing}")
            order = ([deps.cfg.packed] if deps.cfg.packed else []) + list(deps.cfg.sidecars)
            for spec in order:     # packed, SWA, then the sidecars (the DraftState order)
                sel = deps.pages_of(spec.role, self.pages)
                self._dep_plans.append(_DepPlan(spec, pools[spec.role], sel, layout, me))

    # --- main thread ------------------------------------------------------------------
    def start(self) -> None:
        if self.deps is not None:
            from hicache.runtime.draft import Kind
            self._tid = self.deps.launch(Kind.GATHER, self.pages, self.pages)    # TransferLaunch
        if self.overlap:
            self._thread = threading.Thread(target=self._run_all, name=f"gather-r{self.comm.rank}", daemon=True)
            self._thread.start()

    def acquire(self, layer: int) -> torch.Tensor:
        """The gathered prefix of `layer` ([pages, 2, ps, H, D]); AttentionStart."""
        t0 = time.perf_counter()
        if self.overlap:
            if not self._ready[layer].wait(self.timeout_s):
                self._raise_if_failed()
                raise LocalTimeout(f"gather[{layer}]", self.comm.rank, "gathered layer never became ready")
            self._raise_if_failed()
        else:
            self._gather(layer)
        self.stats.wait_s += time.perf_counter() - t0
        self._step(LayerPipeline.AttentionStart, self._guard.attention_start, layer)
        return self._slots[slot_of(layer)]

    def release(self, layer: int) -> None:
        self._step(LayerPipeline.AttentionFinish, self._guard.attention_finish, layer)
        self._free[slot_of(layer)].set()

    def dependent(self, role) -> torch.Tensor:
        """The gathered pages of a dependent pool, [layers, selected pages, *page shape] in
        prefix order (the pool's hit policy selects them); waits on the gather's completion
        (with overlap off it comes with `acquire` of the last layer). BufferRead."""
        from hicache.runtime.draft import Role
        role = Role(role)
        if not any(p.role is role for p in self._dep_plans):
            raise ValueError(f"role: this gather carries no {role.value} pool")
        if not self._done.wait(self.timeout_s):
            self._raise_if_failed()
            raise LocalTimeout("gather[dependents]", self.comm.rank, "the gather's completion never fired")
        self._raise_if_failed()
        name = "target" if role is Role.SWA else role.value
        self.deps.record_read(self._tid, name)
        return self._dep_out[role]

    def close(self) -> None:
        """The gather's end: its worker joined; its dependent transfer retired (TransferRetire:
        `dependent` reads after this return the gather's own output, recorded as no read), or
        aborted when the gather failed (TransferAbort)."""
        if self._thread is not None:
            self._thread.join(self.timeout_s)
        if self.deps is not None:
            # a gather that failed, or ended before its completion (overlap off: its error
            # went to the caller of `acquire`), never fires: aborted, TransferAbort (a fired
            # one retires either way)
            from hicache.runtime.cache import is_violation
            done = self._error is None and self._done.is_set()
            if done:
                self.deps.retire(self._tid)
            elif not is_violation(self._error):    # (after a violation the records stay as it left them)
                self.deps.abort(self._tid)
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _step(self, action, transition, layer: int, *, cp_rank: int | None = None, **fields) -> None:
        """One spec step: the guard transition, then its event, under one lock. The event
        follows its transition, so a monitor maps a state that includes the step; and no other
        thread's transition falls between them, so the state it maps is exactly this step's.
        `cp_rank`: the rank a RankRestoreLayer is about (this one, or a peer)."""
        with self._lock:
            if action is LayerPipeline.RankRestoreLayer and cp_rank != self._me:
                transition(cp_rank, layer)
            else:
                transition(layer)
            self.listener(action, {"rank": self.comm.rank, "cp_rank": self._me if cp_rank is None else cp_rank,
                                   "layer": layer, **fields})

    def _restore(self, layer: int) -> None:
        """Wait for this rank's restore of `layer` (RankRestoreLayer)."""
        if not self.restore_wait(layer):
            raise LocalTimeout(f"gather[{layer}]", self.comm.rank, f"restore of layer {layer} did not finish")
        self._step(LayerPipeline.RankRestoreLayer, self._guard.rank_restore_layer, layer, cp_rank=self._me)

    # --- gather (thread or main) --------------------------------------------------------
    def _run_all(self) -> None:
        try:
            for layer in range(self.num_layers):
                if not self._free[slot_of(layer)].wait(self.timeout_s):
                    raise LocalTimeout(f"gather[{layer}]", self.comm.rank, "scratch slot never released")
                self._gather(layer)
        except BaseException as exc:
            self._error = exc
            for ev in self._ready:
                ev.set()
            self._done.set()

    def _gather(self, layer: int) -> None:
        blind = layer == self._blind_layer       # seeded bug 11 (GatherFaults)
        if not blind:
            self._restore(layer)
        slot = slot_of(layer)
        self._free[slot].clear()
        t0 = time.perf_counter()
        ps = self.layout.page_size
        # one byte buffer: the header (this rank's restored layers, read by the other ranks),
        # then this rank's pages of the prefix, packed with the page-gather kernel
        send = torch.zeros(HEADER + self._width * self._page_bytes, dtype=torch.uint8)
        send[:HEADER].view(torch.int64)[0] = len(self._guard.restored)
        if self._pack_ids.numel():
            mine = send[HEADER:].view(self.pool.dtype).view(self._width, *self.pool.shape[2:])
            gather_pages(self.pool[layer].view(-1, *self._row), self._pack_ids,
                         mine[:self._pack_ids.numel()].view(-1, *self._row), page_size=ps)
        recv = torch.empty(self.layout.cp_size, send.numel(), dtype=torch.uint8)
        parts = list(recv.unbind(0))
        label = f"gather[{layer}]"
        self.comm.run_step(label, lambda: dist.all_gather(parts, send, group=self.comm.gather_group))
        # what every rank had restored when it sent: learned before this rank writes its slot
        counts = recv[:, :HEADER].contiguous().view(torch.int64)[:, 0].tolist()
        for r, k in enumerate(counts):
            if r != self._me:
                for learned in range(self._guard.peers[r], k):
                    self._step(LayerPipeline.RankRestoreLayer, self._guard.peer_restore_layer, learned, cp_rank=r)
        # (a late peer: the guard raises here; this rank late: its monitor, checking the step)
        self._step(LayerPipeline.GatherStart, self._guard.gather_start, layer, slot=slot)
        # The verdict every rank reaches on the same headers, its own included: a rank that
        # sent before restoring the layer stops here too, not in the next layer's collective.
        late = late_ranks(counts, layer)
        if late:
            raise IllegalTransition(f"GatherStart({layer}) before rank {late[0]} restored layer {layer} "
                                    f"(its part of the gather says it had restored {counts[late[0]]} layers)")
        out = self._slots[slot]
        if self._unpack_ids.numel():   # owner-major parts -> prefix order
            pages = recv[:, HEADER:].contiguous().view(self.pool.dtype)
            gather_pages(pages.view(-1, *self._row), self._unpack_ids, out.view(-1, *self._row), page_size=ps)
            self._target_moved += self._unpack_ids.numel()
        if blind:
            self._restore(layer)       # the restore its gather did not wait for
        if layer == self.num_layers - 1:
            self._gather_dependents()
        self.stats.gather_s += time.perf_counter() - t0
        self.stats.layers += 1
        self._step(LayerPipeline.GatherFinish, self._guard.gather_finish, layer, slot=slot)
        self._ready[layer].set()
        if layer == self.num_layers - 1:
            self._done.set()

    def _gather_dependents(self) -> None:
        """Every dependent pool's pages, then the completion (see the module docstring)."""
        deps, tid = self.deps, self._tid
        if deps is None:
            return
        skip = FAULTS.skip_dependent_gather
        with_target = [p for p in self._dep_plans if p.packed or p.swa]
        sidecars = [p for p in self._dep_plans if not (p.packed or p.swa)]
        # each finish carries the (page, layer) copies its gather wrote (the DraftState map
        # takes a pool as copied only when that is what the transfer's page list requires)
        moved_swa = None
        for plan in with_target:        # the packed rows and SWA ride with the target's pages
            if plan.packed and skip:
                self._dep_out[plan.role] = self._empty(plan)     # what a consumer then reads
                continue
            self._dep_out[plan.role], moved = self._gather_pool(plan)
            if plan.packed:
                deps.finish_draft(tid, plan.role, moved)
            else:
                moved_swa = moved
        deps.finish_target(tid, self._target_moved, moved_swa)
        for plan in sidecars:
            if skip:
                self._dep_out[plan.role] = self._empty(plan)
                continue
            self._dep_out[plan.role], moved = self._gather_pool(plan)
            deps.finish_draft(tid, plan.role, moved)
        deps.fire(tid)

    @staticmethod
    def _empty(plan: _DepPlan) -> torch.Tensor:
        pool = plan.pool
        return torch.zeros(pool.shape[0], len(plan.selected), *pool.shape[2:], dtype=pool.dtype)

    def _gather_pool(self, plan: _DepPlan) -> tuple[torch.Tensor, int]:
        """All-gather one pool's selected pages (every layer) into prefix order: (the pages,
        the (page, layer) copies written). Pages move as bytes (any dtype, fp8 included, over
        any backend)."""
        pool = plan.pool
        nl, npages = pool.shape[0], pool.shape[1]
        out = self._empty(plan)
        if plan.width == 0:
            return out, 0
        src = pool.reshape(nl, npages, -1).view(torch.uint8)       # [layers, pages, page bytes]
        nb = src.shape[2]
        dst = out.view(nl, len(plan.selected), -1).view(torch.uint8)
        send = torch.zeros(nl, plan.width, nb, dtype=torch.uint8)
        k = plan.pack_ids.numel()
        for layer in range(nl):
            if k:
                gather_pages(src[layer], plan.pack_ids, send[layer, :k], page_size=1)
        parts = [torch.empty_like(send) for _ in range(self.layout.cp_size)]
        self.comm.run_step(f"gather[{plan.role.value}]",
                           lambda: dist.all_gather(parts, send, group=self.comm.gather_group))
        both = torch.cat(parts, dim=1)
        for layer in range(nl):
            gather_pages(both[layer], plan.unpack_ids, dst[layer], page_size=1)
        return out, nl * plan.unpack_ids.numel()
