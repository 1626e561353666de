"""A copy's finish says what the copy moved: DraftState false negatives of a copy that did less.

The DraftState monitor checked the copy *events*, and the runtime emitted each finish from its
bookkeeping, the step after the copy: a sidecar copy skipped or handed too few pages, or a
packed launch without its draft rows, still emitted its finish, so strict verified mode raised
nothing while the restored bytes were wrong. Now each launch adds the (page, layer) copies it
was handed to the transfer's record, each finish event carries that count (`moved`), and the
map counts a pool's copy as finished only when the count is what the transfer's page list
requires of the pool. Each injected short copy below is run twice: unmonitored, to show the
bytes it leaves are wrong with no error, then under strict verified mode, which must name it.
"""
from __future__ import annotations

import pytest
import torch

from draft_support import (DictStorage, compute, expected, keep_records, make_cache, pool_of, raised_on_the_scheduler,
                           wipe_device)
from hicache.monitors.runtime import ProtocolViolation
from hicache.runtime import draft
from hicache.runtime.draft import DependentSet, Role
from hicache.runtime.events import Recorder
from hicache.protocol.vocabulary import DraftState as D

TOKENS = list(range(500, 524))      # 6 pages of 4 tokens

#: the conjuncts a strict monitor names (action, conjunct)
DRAFT_MISSING = ("CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools")
TARGET_MISSING = ("CompletionFire", "tgtDone[t]")
PACKED_MISSING = ("TargetCopyFinish", "Packed \\subseteq draftDone[t]")




# ------------------------------------------------------------------ injected short copies
def short_lists(role: Role, keep: int):
    """The sidecar `role`'s page lists cut to their first `keep` pages (0: an empty copy)."""
    def inject(mp: pytest.MonkeyPatch) -> None:
        orig = DependentSet._sidecar_lists

        def lists(self, spec, src, dst, restore):
            s, d = orig(self, spec, src, dst, restore)
            return (s[:keep], d[:keep]) if spec.role is role else (s, d)
        mp.setattr(DependentSet, "_sidecar_lists", lists)
    return inject


def skipped_sidecar(role: Role):
    """The sidecar `role`'s copy never launched."""
    def inject(mp: pytest.MonkeyPatch) -> None:
        orig = DependentSet._copy_sidecar

        def copy(self, rec, spec, *args):
            if spec.role is not role:
                orig(self, rec, spec, *args)
        mp.setattr(DependentSet, "_copy_sidecar", copy)
    return inject


def packed_without_draft(mp: pytest.MonkeyPatch) -> None:
    """Each packed launch moves the target's rows only (the plain target copy of its layer, or
    of each layer), as if the draft segment were left out of the launch."""
    def launch(self, rec, layer, to_host, dev_pages, host_slots):
        for one in range(self.cfg.target.layers) if layer is None else (layer,):
            self._copy_target(rec, one, to_host, dev_pages, host_slots)
    mp.setattr(DependentSet, "_packed", launch)


#: case -> (layout, injection, the pool whose bytes end up wrong, what strict mode names)
LOAD_CASES = {
    "sidecar_short": ("sidecar", short_lists(Role.DRAFT_INDEXER, 2), "draft_indexer", DRAFT_MISSING),
    "sidecar_empty": ("sidecar", short_lists(Role.DRAFT_KV, 0), "draft_kv", DRAFT_MISSING),
    "sidecar_skipped": ("sidecar", skipped_sidecar(Role.DRAFT_STATE), "draft_state", DRAFT_MISSING),
    "packed_without_draft": ("packed", packed_without_draft, "draft_kv", PACKED_MISSING),
    "swa_short": ("packed", short_lists(Role.SWA, 1), "swa", TARGET_MISSING),
}
BACKUP_CASES = {
    "sidecar_short": ("sidecar", short_lists(Role.DRAFT_INDEXER, 5), "draft_indexer", DRAFT_MISSING),
    "sidecar_skipped": ("packed", skipped_sidecar(Role.DRAFT_STATE), "draft_state", DRAFT_MISSING),
    "packed_without_draft": ("packed", packed_without_draft, "draft_kv", PACKED_MISSING),
}


def catch(deps: DependentSet) -> list[ProtocolViolation]:
    """Every violation the set's monitor raises, on whichever thread: a backup's is raised on
    the writer thread and kept on its op, which the cache then drops as a failed backup."""
    seen: list[ProtocolViolation] = []
    (mon,) = deps.bus.listeners

    def listener(action, fields) -> None:
        try:
            mon(action, fields)
        except ProtocolViolation as e:
            seen.append(e)
            raise
    deps.bus.listeners = [listener]
    return seen


def load(cache):
    """Evict the device copy of TOKENS, zero the device pools, load the prefix back from host."""
    assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
    wipe_device(cache, cache.deps)
    req = cache.match(TOKENS)
    assert req.device_hit == 0
    op = cache.load_back(req)
    assert op is not None and op.wait(30)
    return req, op


def wrong_pages(cache, deps, req, pool: str) -> int:
    got = deps.read(req, None if pool == "target" else pool)
    want = expected(pool, deps, TOKENS, 6, pool_of(cache, deps, pool).page_nbytes)
    assert len(got) == len(want)
    return sum(not torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("case", sorted(LOAD_CASES))
def test_a_short_load_back_copy_is_named(case, monkeypatch, tmp_path, verified):
    layout, inject, pool, named = LOAD_CASES[case]
    # unmonitored: the load completes without an error and the pool's bytes are wrong
    with verified.unmonitored():
        cache, deps = make_cache(draft_layout=layout)
    compute(cache, deps, TOKENS)
    with monkeypatch.context() as mp:
        inject(mp)
        req, op = load(cache)
    assert op.error is None and deps.bus.listeners == []
    assert wrong_pages(cache, deps, req, pool) > 0
    cache.close()
    # strict verified mode: the completion after the short copy fails its check
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make_cache(draft_layout=layout)
    seen = catch(deps)
    compute(cache, deps, TOKENS)
    assert seen == []                                   # the backup was whole
    with monkeypatch.context() as mp:
        inject(mp)
        _, op = load(cache)
    assert isinstance(op.error, ProtocolViolation), op.error
    assert seen == [op.error]
    assert (op.error.action, op.error.conjunct) == named
    assert op.error.kind == "action" and op.error.trace_path
    raised_on_the_scheduler(cache.close, op.error)


@pytest.mark.parametrize("case", sorted(BACKUP_CASES))
def test_a_short_backup_copy_is_named(case, monkeypatch, tmp_path, verified):
    layout, inject, pool, named = BACKUP_CASES[case]
    with verified.unmonitored():
        cache, deps = make_cache(draft_layout=layout)
    with monkeypatch.context() as mp:
        inject(mp)
        compute(cache, deps, TOKENS)
    req, op = load(cache)                               # a whole load of what the backup left
    assert op.error is None
    assert wrong_pages(cache, deps, req, pool) > 0
    cache.close()
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make_cache(draft_layout=layout)
    seen = catch(deps)
    with monkeypatch.context() as mp:
        inject(mp)
        # (the backup's violation, raised on the writer thread, surfaces at compute's drain)
        raised_on_the_scheduler(lambda: compute(cache, deps, TOKENS), None)
    assert len(seen) == 1, seen
    assert (seen[0].action, seen[0].conjunct) == named
    assert deps.transfers[seen[0].arguments["t"]].kind is draft.Kind.BACKUP
    cache.close()


# ------------------------------------------------------------------ the counts on legal runs
def _finishes(rec: Recorder, t: int) -> dict[str, int | None]:
    out = {}
    for e in rec.events:
        if e.args["t"] != t:
            continue
        if e.action == D.DraftCopyFinish:
            out[e.args["p"]] = e.args["moved"]
        elif e.action == D.TargetCopyFinish:
            out["target"], out["swa"] = e.args["moved"], e.args["moved_swa"]
    return out


@pytest.mark.parametrize("layout", ["packed", "sidecar"])
def test_each_finish_carries_what_its_copies_moved(layout, tmp_path, verified):
    """Backup, load-back, storage backup and a prefetch cut short by a storage miss: each
    finish reports the (page, layer) copies the map requires of its pool (page counts x pool
    layers: target 2, draft KV 1, indexer 1, SWA 2, state 1), and the strict monitor agrees."""
    verified.enable("strict", violation_dir=str(tmp_path))
    store = DictStorage()
    first, deps_first = make_cache(store, draft_layout=layout)
    rec = Recorder()
    deps_first.bus.subscribe(rec)
    recs = keep_records(deps_first)
    compute(first, deps_first, TOKENS[:12])            # 3 pages, backed up to host and storage
    first.drain()
    first.close()
    assert deps_first.transfers == {}                  # neither is read: retired as they fired
    kinds = {t: r.kind for t, r in recs.items()}
    assert sorted(kinds.values()) == [draft.Kind.BACKUP, draft.Kind.STORE]
    for t, kind in kinds.items():                      # every page of every pool
        assert _finishes(rec, t) == {"target": 6, "draft_kv": 3, "draft_indexer": 3, "swa": 6,
                                     "draft_state": 3}, kind
    cache, deps = make_cache(store, draft_layout=layout)
    rec = Recorder()
    deps.bus.subscribe(rec)
    recs = keep_records(deps)
    mon = verified.monitor_of(deps)
    req = cache.match(TOKENS)
    assert cache.prefetch(req)                         # 6 pages asked, 3 in storage
    assert cache.finish_prefetch(req) == 3
    (pre,) = [t for t, r in recs.items() if r.kind is draft.Kind.PREFETCH]
    assert len(recs[pre].src_idx["kv"]) == 6 and recs[pre].fetched == 3
    assert _finishes(rec, pre) == {"target": 6, "draft_kv": 3, "draft_indexer": 3, "swa": 6,
                                   "draft_state": 3}
    op = cache.load_back(req, _tier="storage")
    assert op is not None and op.wait(30) and op.error is None, op.error
    (load_t,) = [t for t, r in recs.items() if r.kind is draft.Kind.LOAD]
    assert list(deps.transfers) == [load_t]            # req may still read it
    # a restore: SWA its 2 trailing pages, the state the last of those
    assert _finishes(rec, load_t) == {"target": 6, "draft_kv": 3, "draft_indexer": 3, "swa": 4,
                                      "draft_state": 1}
    for t, r in recs.items():
        for pool, moved in r.moved.items():
            assert moved == mon.rmap.required(r, pool), (r.kind, pool)
    cache.finish(req)
    assert list(deps.transfers) == [load_t]            # not applied yet: a request may join it
    cache.close()
    assert deps.transfers == {}                        # applied at close, its request ended: retired
    assert mon.checked == mon.steps > 0


def test_a_prefetch_that_skips_the_draft_parts_reports_none_moved(tmp_path, verified):
    """The fault switch on a storage hit: the prefetch writes the target and SWA parts of each
    value only; its draft finishes still come, with 0 copies, and its completion is named."""
    store = DictStorage()
    first, deps_first = make_cache(store, draft_layout="packed")
    compute(first, deps_first, TOKENS)
    first.close()
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make_cache(store, draft_layout="packed")
    seen = catch(deps)
    rec = Recorder()
    deps.bus.listeners = [rec, *deps.bus.listeners]   # first: it sees the event that fails
    draft.FAULTS.skip_draft_restore = True
    req = cache.match(TOKENS)
    assert cache.prefetch(req)
    # (the violation, raised on the prefetch thread, surfaces when the prefetch is finished)
    raised_on_the_scheduler(lambda: cache.finish_prefetch(req), None)
    (pre,) = deps.transfers
    # 6 pages: the target's 2 layers and SWA's 2 were written, the packed draft KV's not; the
    # target's finish (the packed rows ride in it) is the step that fails
    assert _finishes(rec, pre) == {"draft_kv": 0, "target": 12, "swa": 12}
    assert len(seen) == 1 and (seen[0].action, seen[0].conjunct) == PACKED_MISSING
    cache.close()


# ------------------------------------------------------------------ the public steps
def test_public_steps_take_a_count(tmp_path, verified):
    """The steps a transfer driven outside the cache calls (the CP gather) take the count its
    copy moved: a short one is named at the completion; without one (None) the finish is
    taken as the whole copy; a count that is not one is refused."""
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make_cache(draft_layout="sidecar")
    seen = catch(deps)
    sidecars = [s.role for s in deps.cfg.sidecars if s.role is not Role.SWA]
    with pytest.raises(ValueError, match=r"moved: a count of \(page, layer\) copies, .* got -1"):
        deps.finish_draft(deps.launch("gather", [0, 1], [0, 1]), Role.DRAFT_KV, moved=-1)
    tid = deps.launch("gather", [0, 1], [0, 1])
    deps.finish_target(tid, moved=4, moved_swa=4)      # 2 pages x 2 layers each
    for role in sidecars:
        deps.finish_draft(tid, role)                   # not counted
    deps.fire(tid)
    assert seen == []
    tid = deps.launch("gather", [0, 1], [0, 1])
    deps.finish_target(tid)
    deps.finish_draft(tid, Role.DRAFT_KV, moved=1)     # 1 of its 2 pages
    for role in sidecars[1:]:
        deps.finish_draft(tid, role)
    with pytest.raises(ProtocolViolation) as e:
        deps.fire(tid)
    assert (e.value.action, e.value.conjunct) == DRAFT_MISSING
    cache.close()
