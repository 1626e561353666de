"""Refinement map: a `DependentSet`'s transfer records -> spec/DraftState variables.

Attach with `hicache.monitors.runtime.Monitor(DraftStateMap(deps), VerifyConfig(mode=...))`
subscribed to `deps.bus` (sample mode: `DraftStateMap(deps, actions=False)`). Each DraftState
event is one spec step, so the monitor checks the action (with the slot of the event's `t`,
and its `p`) and then every invariant; excepted, each checked by its invariants only: a
finish whose copy was not whole and a launch with a draft role absent (below), a launch that
grows the window. Without action checks (`actions=False`) a TransferRetire (a TransferAbort)
is checked on the state before it (its slot is freed at the next event), in sample mode at
every one.

  spec transfer t   = a slot of a window 1..capacity (a constant must not change between
                      a step's two states). A launch takes the lowest idle slot for its tid;
                      TransferRetire (the runtime's owner of the transfer says nobody reads
                      it any more, and it leaves the set's records) frees it, idle again as
                      the spec's retire makes it; so does TransferAbort (a copy failed: it
                      never fires). A launch with every slot taken doubles the
                      window (that one event: invariants only). So the window is as wide as
                      the transfers live at once, not the transfers of the whole run, and a
                      step's cost stays flat over a long canary. The events carry the
                      runtime's tid (the trace's `t` field), the spec steps the slot (the
                      trace's `slot`, `spec_args`). A launch binds its tid to a slot; any
                      other event of a tid with no slot (never launched, or retired) is
                      mapped onto the lowest idle slot, unbound: its guard, which needs a
                      launched transfer, fails there (strict mode; without action checks
                      the state shows nothing of it). The runtime emits no such event.
  layout[p]         = the layout of the pool with role p; "sidecar" for a draft role the
                      engine does not configure (below).
  phase, read       = the record's fields (written by the runtime step that emits the
                      event, under the set's lock).
  draftDone[t]      = the pools p whose finish event came (record `done`) and whose copy was
                      whole: the (page, layer) copies its launches were handed (record
                      `moved[p]`, which the finish event carries) equal what t's page list
                      requires of p (`required`, computed here from the configured pools,
                      not from the runtime's own derivation). A finish whose caller did not
                      count (`moved` None: a public step, the CP gather) is taken as whole.
  tgtDone[t]        = the record's `tgt_done`, with the target's and the SWA pool's copies
                      whole in the same sense.
  readStale[t]      = the record's `read_stale` (pools read before their finish event), and
                      the pools read whose copy is not whole (a copy adds nothing after its
                      finish, so whole-or-not at the read is whole-or-not now).
  srcIdx[t][s]      = an id for the page list source s handed out ("kv": the target's list,
                      "swa": the SWA pool's derived list, the target's without an SWA pool).
                      Equal lists have equal ids. An id is held by the slots whose transfer
                      maps a list to it and is reused once none does (its slot retired), so
                      ids stay within NIdx = 2 x capacity (two lists per transfer) unless a
                      faulty transfer maps more lists (NIdx then covers the largest id).
  xferIdx[t][p]     = the id of the source list pool p derived its pages from.
  TargetRow, Draft*Row = `row_signature` of the target and of each draft pool, from its
                      configured geometry: "dtype/kv_kind/row width/indexing", the indexing
                      with the hit policy when a restore selects a subset of pages. Computed
                      here, not taken from the runtime's own `packed_refusal`, so a refusal
                      check that let an incompatible pool be packed is still caught
                      (PackedOnlyCompatible).
  Draft*Source      = "swa" for a pool whose declared source is the SWA pool, else "kv".
  HostSlots         = min(host pages, 8): PackedOffsetsDisjoint is arithmetic over the
                      constants (proved for all sizes by `hicache prove`), checked here on a
                      prefix of the slots to keep each step cheap.

A finish event whose copy is not whole is no spec step (the pool's copy did not finish):
it is checked by its invariants only, and the completion that follows fails its guard
(`CompletionFire`'s `draftDone[t] = DraftPools` or `tgtDone[t]`; a packed pool's, the
target's `Packed \\subseteq draftDone[t]`), a read of the pool `NoReadBeforeCompletion`.

An absent draft role (an engine with a draft KV pool only, the usual speculative decoding,
or with no draft pool at all) is the spec's pool p holding no bytes: a sidecar of row
ABSENT_ROW (never the target's, so never packable) indexed from "kv", whose empty copy of
transfer t finished when t launched. Its layout, xferIdx[t][p] = srcIdx[t]["kv"], and p in
draftDone[t] from TransferLaunch on follow. So a TransferLaunch event is there the compound
TransferLaunch(t) then DraftCopyFinish(t, p) per absent p (its invariants only); every other
event is still one spec step, and CompletionFire still needs each configured pool's copy.
"""
from __future__ import annotations

import heapq

from hicache.kernels import HitPolicy, IndexSource
from hicache.monitors.generated import draft_state as spec
from hicache.monitors.runtime import compound_step
from hicache.protocol.vocabulary import DraftState as D
from hicache.runtime.draft import (DRAFT_ROLES, RESTORES, DependentSet, DependentSpec, Indexing, Kind, Role,
                                  Transfer)
from hicache.tla.values import mk_fcn

from .steps import capacity

_ACTIONS = {a.value for a in D}
#: the steps that end a transfer: its slot is idle again after them
_ENDS = frozenset({D.TransferRetire.value, D.TransferAbort.value})

#: the spec's per-pool constants, by the runtime role they describe
_ROW_CONSTANT = {Role.DRAFT_KV: "DraftKVRow", Role.DRAFT_INDEXER: "DraftIndexerRow",
                 Role.DRAFT_STATE: "DraftStateRow"}
_SOURCE_CONSTANT = {Role.DRAFT_KV: "DraftKVSource", Role.DRAFT_INDEXER: "DraftIndexerSource",
                    Role.DRAFT_STATE: "DraftStateSource"}
#: runtime index source -> the spec's Sources (DependentSpec refuses any other for a pool)
_SOURCE = {IndexSource.TARGET_KV: "kv", IndexSource.SWA: "swa"}
#: the row signature of a draft role the engine does not configure (no row_signature is
#: this: "absent" has no "/"), so the spec allows it the sidecar layout only
ABSENT_ROW = "absent"


def row_signature(dtype: str, kv_kind, width: int, indexing: Indexing,
                  hit_policy: HitPolicy = HitPolicy.ALL_PAGES, trailing: int = 0) -> str:
    """The spec's row signature: equal for two pools exactly when one's rows could be tail
    layers of the other's host slots (same element type, KV planes and row width, and one row
    per token of every hit page)."""
    index = indexing.value if hit_policy is HitPolicy.ALL_PAGES else \
        f"{indexing.value} {hit_policy.value}={trailing}"
    return f"{dtype}/{kv_kind.value}/{width}/{index}"


def pool_row(p: DependentSpec) -> str:
    return row_signature(p.dtype, p.kv_kind, p.heads * p.head_dim, p.indexing, p.hit_policy, p.trailing)


class DraftStateMap:
    spec = spec
    #: what sample mode checks at every occurrence: a retire (an abort) ends its transfer's
    #: record, so a later sample could no longer see a transfer that fired incomplete (whose
    #: page lists were mapped wrong)
    always_check = frozenset(_ENDS)

    def __init__(self, deps: DependentSet, capacity: int = 32, actions: bool = True) -> None:
        roles = {p.role for p in deps.cfg.pools}
        # draft roles the engine does not configure: pools of no bytes (module docstring)
        absent = [r for r in DRAFT_ROLES if r not in roles]
        self.absent = tuple(r.value for r in absent)
        self.deps = deps
        self.capacity = capacity
        self.needs_prestate = actions   # False: check the invariants only after each step
        # the window: slot <-> tid of the transfer in it; idle slots (lowest first)
        self.tid_at: dict[int, int] = {}
        self.slot_of: dict[int, int] = {}
        self._idle = list(range(1, capacity + 1))
        # page list -> [id, slots holding it]; the lists each slot holds; ids free for reuse
        self._ids: dict[tuple, list] = {}
        self._held: dict[int, set] = {}
        self._free_ids: list[int] = []
        self._top_id = 0
        # invariants only: a retiring tid whose slot is freed at the next event, so its retire
        # is checked on the state where the transfer still is (its last state)
        self._retiring: int | None = None
        self._slot = 0          # the slot the last bound event's tid maps to (spec_args)
        # the configured rows and sources: a DraftConfig is frozen, so computed once
        cfg = deps.cfg
        t = cfg.target
        packed = cfg.packed
        self._fixed = {
            "TargetLayers": t.layers, "DraftLayers": packed.layers if packed else 1,
            "HostSlots": max(1, min(t.host_pages, 8)),
            "TargetRow": row_signature(t.dtype, t.kv_kind, t.heads * t.head_dim, Indexing.TOKEN),
            **{_ROW_CONSTANT[p.role]: pool_row(p) for p in cfg.pools if p.role in _ROW_CONSTANT},
            **{_SOURCE_CONSTANT[p.role]: _SOURCE[p.source] for p in cfg.pools if p.role in _SOURCE_CONSTANT},
            **{_ROW_CONSTANT[r]: ABSENT_ROW for r in absent},
            **{_SOURCE_CONSTANT[r]: "kv" for r in absent},
            "BugFireOnTargetOnly": False, "BugPackIncompatible": False}
        self._specs = {p.role.value: p for p in cfg.pools}
        self._has_swa = Role.SWA.value in self._specs
        self._layout = mk_fcn({**{p.role.value: p.layout.value for p in cfg.pools if p.role in DRAFT_ROLES},
                               **{r: "sidecar" for r in self.absent}})

    def constants(self) -> dict:
        return {"NTransfers": self.capacity, "NIdx": max(2 * self.capacity, self._top_id), **self._fixed}

    # ------------------------------------------------------------------ the window
    def _grow(self) -> None:
        """Every slot taken: the window doubles (re-dimensioning, not a spec step: a new
        constants binding), the new slots idle."""
        old, self.capacity = self.capacity, capacity(self.capacity + 1, self.capacity)
        self._idle = list(range(old + 1, self.capacity + 1))

    def _take(self, tid: int) -> tuple[int, bool]:
        """A slot for tid (the lowest idle one), and whether the window had to grow."""
        grew = not self._idle
        if grew:
            self._grow()
        s = heapq.heappop(self._idle)
        self.tid_at[s], self.slot_of[tid] = tid, s
        return s, grew

    def _free(self, tid: int) -> int:
        """tid leaves the window: its slot is idle again, the list ids it held released."""
        s = self.slot_of.pop(tid)
        del self.tid_at[s]
        heapq.heappush(self._idle, s)
        for v in self._held.pop(s, ()):
            e = self._ids[v]
            e[1] -= 1
            if e[1] == 0:
                del self._ids[v]
                heapq.heappush(self._free_ids, e[0])
        return s

    def bind(self, action: str, fields: dict):
        if action not in _ACTIONS:
            return None
        tid = fields["t"]
        if self._retiring is not None:
            self._free(self._retiring)
            self._retiring = None
        if action in _ENDS and tid in self.slot_of and not self.needs_prestate:
            # (its spec step, a slot back to Init, has no invariant to break: the state
            # before it is the one worth checking, and the runtime emits before dropping)
            self._retiring, self._slot = tid, self.slot_of[tid]
            return [(action, None)]
        grew = False
        if action in _ENDS and tid in self.slot_of:
            t = self._free(tid)
        elif tid in self.slot_of:
            t = self.slot_of[tid]
        elif action == D.TransferLaunch:
            t, grew = self._take(tid)
        else:
            # a step of a tid never launched or already retired: the lowest idle slot, not
            # bound to it (its guard, which needs a launched transfer, fails there)
            grew = not self._idle
            if grew:
                self._grow()                # (this event: invariants only, below)
            t = self._idle[0]
        self._slot = t
        if grew:
            # this event is checked by its invariants only: its pre-state was mapped in the
            # smaller window, whose domains differ from the new one's
            return [(action, None)]
        if not self.needs_prestate:
            return [(action, None)]      # invariants only
        if self.absent and action == D.TransferLaunch:
            # with the absent pools' empty copies finishing: several spec steps
            return compound_step(action)
        if action == D.DraftCopyFinish or action == D.TargetCopyFinish:
            rec = self.deps.transfers.get(tid)
            whole = rec is not None and (self._whole(rec, fields["p"]) if "p" in fields
                                         else self._target_whole(rec))
            if not whole:
                return [(action, None)]  # the copy moved too little: no step (module docstring)
        params = (t, fields["p"]) if "p" in fields else (t,)
        return [(action, params)]

    def spec_args(self) -> dict:
        """The spec's transfer (the slot) of the last bound event, recorded beside its
        runtime tid `t` in the monitor's history and traces."""
        return {"slot": self._slot}

    # ------------------------------------------------------------------ whole copies
    def required(self, r: Transfer, pool: str) -> int:
        """The (page, layer) copies pool `pool` ("target", "swa", a draft role) of transfer r
        must move: every layer of the pool, on the pages its hit policy selects from its
        source's list on a restore (load, gather), on every page otherwise (backup, storage).
        A prefetch's list is the prefix its fetch received; a set whose cache holds no bytes
        moves none."""
        cache = self.deps.cache
        if cache is not None and cache.device_pool is None:
            return 0        # a metadata-only cache: nothing to move
        # (a set driven without a cache, by the CP gather, moves the pools' device pages)
        target = self.deps.cfg.target
        n = (r.fetched or 0) if r.kind is Kind.PREFETCH else len(r.src_idx["kv"])
        if pool == "target":
            return n * target.layers
        restore = r.kind in RESTORES
        spec = self._specs[pool]
        if spec.source is IndexSource.SWA:
            n = _selected(self._specs[Role.SWA.value], n, restore)
        return _selected(spec, n, restore) * spec.layers

    def _whole(self, r: Transfer, pool: str) -> bool:
        """Whether pool's copy of r, as its finish reported it, moved what r requires."""
        if pool not in r.moved:
            return False
        moved = r.moved[pool]
        return moved is None or moved == self.required(r, pool)

    def _target_whole(self, r: Transfer) -> bool:
        return self._whole(r, "target") and (not self._has_swa or self._whole(r, Role.SWA.value))

    def _id(self, pages: tuple, slot: int) -> int:
        """The id of page list `pages`, held by `slot` from now until its transfer retires."""
        e = self._ids.get(pages)
        if e is None:
            if self._free_ids:
                i = heapq.heappop(self._free_ids)
            else:
                self._top_id += 1
                i = self._top_id
            e = self._ids[pages] = [i, 0]
        held = self._held.setdefault(slot, set())
        if pages not in held:
            held.add(pages)
            e[1] += 1
        return e[0]

    def state(self) -> dict:
        recs = self.deps.transfers
        absent = frozenset(self.absent)
        phase, tgt, done, read, stale, src, xfer = {}, {}, {}, {}, {}, {}, {}
        zero_src = mk_fcn({"kv": 0, "swa": 0})
        zero_x = mk_fcn({r.value: 0 for r in DRAFT_ROLES})
        tid_at = self.tid_at
        for t in range(1, self.capacity + 1):
            tid = tid_at.get(t)
            r = recs.get(tid) if tid is not None else None
            if r is None:
                phase[t], tgt[t], done[t], read[t], stale[t] = "idle", False, frozenset(), frozenset(), frozenset()
                src[t], xfer[t] = zero_src, zero_x
                continue
            phase[t] = r.phase
            tgt[t] = r.tgt_done and self._target_whole(r)
            done[t] = frozenset(p for p in r.done if self._whole(r, p)) | absent
            read[t] = frozenset(r.read)
            copied = (done[t] | {"target"}) if tgt[t] else done[t]
            stale[t] = frozenset(r.read_stale) | (read[t] - copied)
            src[t] = mk_fcn({s: self._id(v, t) for s, v in r.src_idx.items()})
            kv = r.src_idx["kv"]
            xfer[t] = mk_fcn({**{p: self._id(v, t) for p, v in r.xfer_idx.items()},
                              **{p: self._id(kv, t) for p in absent}})
        return {"layout": self._layout, "phase": mk_fcn(phase), "tgtDone": mk_fcn(tgt),
                "draftDone": mk_fcn(done), "read": mk_fcn(read), "readStale": mk_fcn(stale),
                "srcIdx": mk_fcn(src), "xferIdx": mk_fcn(xfer)}


def _selected(spec: DependentSpec, n: int, restore: bool) -> int:
    """Pages `spec`'s hit policy selects from a source list of n pages."""
    if not restore or spec.hit_policy is HitPolicy.ALL_PAGES:
        return n
    return min(n, spec.trailing)
