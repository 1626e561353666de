"""A load-back whose copy fails fills nothing: its nodes' device copies (pages allocated at
its start, never written) leave the tree, so no prefix hands them out, now or later.

Before, the nodes kept the unwritten pages as device copies: the request read them as its
prefix, and every later request matched them as a device hit (silent wrong KV)."""
from __future__ import annotations

import threading

import pytest
import torch

from runtime_helpers import check_prefix, compute, serve
from runtime_support import stamp
from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlotState as S
from hicache.runtime.cache import HiCache
from hicache.runtime.config import CacheConfig
from hicache.runtime.events import Recorder

PS = 2
TOKENS = [1, 2, 3, 4, 5, 6]          # 3 pages


class CopyFailed(RuntimeError):
    pass


@pytest.fixture
def host_only():
    """A cache whose TOKENS prefix is on host only (device copies evicted and zeroed), with
    its events recorded; its load-backs' copies fail until `broken[0]` is set False."""
    cache = HiCache(CacheConfig(page_size=PS, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2))
    rec = Recorder()
    cache.bus.subscribe(rec)
    serve(cache, TOKENS)
    cache.drain()
    assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
    cache.device_pool.buf.zero_()
    broken = [True]
    orig = cache._load_layer_fn

    def load_fn(op):
        copy = orig(op)

        def maybe(layer):
            if broken[0] and layer == 1:         # the first layer lands, the second fails
                raise CopyFailed("copy kernel failed")
            copy(layer)
        return maybe
    cache._load_layer_fn = load_fn
    yield cache, rec, broken
    cache.close()


def test_a_failed_load_leaves_no_device_copy_and_its_slots_readable(host_only):
    cache, rec, _ = host_only
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30) and isinstance(op.error, CopyFailed)
    assert op.wait_layer(0) and not op.wait_layer(1)       # layer 1 never landed
    cache.poll()
    assert cache.prefix_pages(req) == [] and req.node.device is None and req.node.host is not None
    assert cache.host.all_in(req.node.host, S.SYNCED)        # the host copy is intact, readable
    assert cache.metrics.load_failures == 1 and cache.metrics.load_failed_pages_kept == 0
    # the hit it counted at its start is taken back; it moved nothing
    assert req.host_hit == 0 and cache.metrics.host_hit_tokens == 0 and cache.metrics.load_tokens == 0
    assert cache.dev_alloc.free == cache.cfg.device_pages        # its pages went back
    ends = [e.action for e in rec.events if e.action in (A.LoadBackFinish, A.LoadBackFail)]
    assert ends == [A.LoadBackFail]
    cache.finish(req)
    later = cache.match(TOKENS)
    assert later.device_hit == 0 and cache.prefix_pages(later) == []


def test_the_failure_shortens_the_prefix_before_the_ack_is_applied(host_only):
    """prefix_pages after the wait, with no poll between: the failed load's pages are already
    out of the prefix; the request computes them, inserts, and the tree holds its bytes."""
    cache, _, _ = host_only
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30) and op.error is not None and not op.applied
    assert cache.prefix_pages(req) == []
    assert compute(cache, req)                # writes and inserts all 3 pages
    check_prefix(cache, req)
    cache.finish(req)
    cache.poll()
    assert op.applied and cache.metrics.load_failures == 1
    again = cache.match(TOKENS)
    assert again.device_hit == 3
    check_prefix(cache, again)
    cache.finish(again)


def test_a_later_load_of_the_same_nodes_restores_their_bytes(host_only):
    cache, _, broken = host_only
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op.wait(30) and op.error is not None
    cache.poll()
    cache.finish(req)
    broken[0] = False
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30) and op.error is None
    assert len(cache.prefix_pages(req)) == 3
    check_prefix(cache, req)
    cache.finish(req)
    cache.poll()


def test_a_request_that_joined_the_failed_load_reads_no_page_of_it(host_only):
    """b matched while a's load was in flight (it holds the load too): once the load failed,
    b's prefix ends before its nodes as well."""
    cache, _, _ = host_only
    a = cache.match(TOKENS)
    op = cache.load_back(a)
    b = cache.match(TOKENS)
    assert op in b.loads
    assert op.wait(30) and op.error is not None
    assert cache.prefix_pages(b) == [] and cache.prefix_pages(a) == []
    cache.finish(a)
    cache.finish(b)
    cache.poll()
    assert cache.tree.device_pages == 0


def test_a_zeroed_device_page_is_what_the_failure_would_have_served(host_only):
    """The fixture's premise: the load's pages hold no bytes of the prefix (zeroed), so a
    prefix that listed them would read wrong KV (check_prefix fails on such a page)."""
    cache, _, broken = host_only
    broken[0] = False
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op.wait(30) and op.error is None
    page = cache.prefix_pages(req)[0]
    cache.device_pool.buf.view(cache.device_pool.pages, -1)[page].zero_()
    nb = cache.device_pool.page_nbytes
    assert not torch.equal(cache.device_pool.read_page(page), stamp(req.key, 0, nb, PS))
    with pytest.raises(AssertionError, match="holds wrong bytes"):
        check_prefix(cache, req)
    cache.finish(req)
    cache.poll()


def test_an_insert_over_a_failed_load_keeps_the_inserting_requests_pages():
    """c matched before the prefix was cached (it holds no load of it) and computes it all;
    meanwhile a's load-back of the prefix failed. c's insert waits on that load, drops its
    unwritten pages and gives the nodes c's own (before: the tree counted the load's pages
    as already cached, freed c's, and kept the unwritten ones)."""
    cache = HiCache(CacheConfig(page_size=PS, device_pages=6, host_pages=8, layers=2, heads=1, head_dim=2))
    c = cache.match(TOKENS)
    assert c.device_hit == 0 and c.node is cache.tree.root
    serve(cache, TOKENS)
    cache.drain()
    assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
    orig = cache._load_layer_fn

    def failing(op):
        def layer(i):
            raise CopyFailed("copy kernel failed")
        return layer
    cache._load_layer_fn = failing
    a = cache.match(TOKENS)
    op = cache.load_back(a)
    assert op is not None and op not in c.loads
    cache._load_layer_fn = orig
    assert compute(cache, c)                 # c's prefix is empty: it writes and inserts all 3 pages
    assert op.error is not None
    check_prefix(cache, c)                   # the tree's pages of the prefix are c's
    cache.finish(c)
    cache.finish(a)
    cache.poll()
    again = cache.match(TOKENS)
    assert again.device_hit == 3
    check_prefix(cache, again)
    cache.finish(again)
    cache.close()


def test_a_load_below_a_failed_load_does_not_start_on_top_of_it(host_only):
    """a loads the prefix's first page (a split node) and fails; b's load-back of the whole
    prefix waits on it first, so b loads nothing below the failed node's unwritten page
    (before: b loaded the pages below it, which then kept the failed node's device copy, a
    device parent of theirs, for good)."""
    cache, _, broken = host_only
    a = cache.match(TOKENS[:PS])              # splits the 3-page node: a's node is its first page
    op = cache.load_back(a)
    assert op is not None and len(op.pages) == 1
    b = cache.match(TOKENS)
    assert op in b.loads
    later = cache.load_back(b)
    assert op.error is not None and later is None     # (the failed node is busy until applied)
    assert cache.prefix_pages(b) == [] and cache.tree.device_pages == 0
    cache.poll()
    broken[0] = False
    later = cache.load_back(b)
    assert later is not None and later.wait(30) and later.error is None
    assert len(cache.prefix_pages(b)) == 3
    check_prefix(cache, b)
    cache.finish(a)
    cache.finish(b)
    cache.poll()
    assert cache.metrics.load_failed_pages_kept == 0


def _pages_consistent(cache) -> None:
    """Every device page exactly once: free, or in one node of the tree."""
    free = cache.dev_alloc.free_set()
    used = [p for x in cache.tree.nodes() if x.device is not None for p in x.device]
    assert len(used) == len(set(used)) and not (free & set(used))
    assert free | set(used) == set(range(cache.cfg.device_pages))


def test_an_insert_whose_joined_load_fails_while_it_waits_is_refused():
    """b joined a's load in flight and computed only its suffix, without waiting on it (as
    a scheduler that trusts the load may). The load fails while b's insert waits on it: the
    insert is refused with why, and no page is left both free and in the tree (before: the
    insert took the prefix before the wait, and gave the freed pages back to the nodes)."""
    cache = HiCache(CacheConfig(page_size=PS, device_pages=6, host_pages=8, layers=2, heads=1, head_dim=2))
    serve(cache, TOKENS)
    cache.drain()
    assert cache.evict_device(6) == 6

    def gated(op):
        go, wait = threading.Event(), op.wait

        def waiting(timeout=None):      # the copy fails once somebody waits on it: mid-insert
            go.set()
            return wait(timeout)
        op.wait = waiting

        def layer(i):
            go.wait(30)
            raise CopyFailed("copy kernel failed")
        return layer
    cache._load_layer_fn = gated
    a = cache.match(TOKENS)
    op = cache.load_back(a)
    b = cache.match(TOKENS + [7, 8])
    assert op in b.loads and len(cache.prefix_pages(b)) == 3 and not op.done.is_set()
    new = cache.alloc(1)
    with pytest.raises(ValueError, match=r"expected 4 new pages, got 1 \(a load-back into req's prefix failed"):
        cache.insert(b, new)
    cache.dev_alloc.release(new)
    _pages_consistent(cache)
    assert cache.prefix_pages(b) == []
    cache.finish(a)
    cache.finish(b)
    cache.poll()
    _pages_consistent(cache)
    cache.close()


def test_a_failed_write_back_copy_keeps_the_device_copy(monkeypatch):
    """write_back backs a node up synchronously before evicting it: when that copy fails the
    node keeps its only copy on device, its host slots go back to idle, and BackupFinish
    says ok=False (before: the slots stayed reserved for good, and the error escaped)."""
    cache = HiCache(CacheConfig(page_size=PS, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2,
                                write_policy="write_back"))
    rec = Recorder()
    cache.bus.subscribe(rec)
    req = serve(cache, TOKENS[:4])
    from hicache.runtime import copy as copy_mod

    def boom(*a, **k):
        raise CopyFailed("copy kernel failed")
    monkeypatch.setattr(copy_mod, "copy_pages", boom)
    assert cache.evict_device(4) == 2                 # the node could not leave: 2 pages stay used
    node = cache.tree.match(req.key).node
    assert node.device is not None and node.host is None
    assert (cache.host.state == int(S.IDLE)).all() and cache.metrics.backup_failures == 1
    last = [e for e in rec.events if e.action == A.BackupFinish][-1]
    assert last.args["ok"] is False and last.args["node"] == node.id
    monkeypatch.undo()
    assert cache.evict_device(4) == 4                 # the copy works again: evicted, backed up
    assert cache.tree.match(req.key).node.host is not None
    cache.close()


def test_a_load_back_with_nothing_to_load_does_not_wait(host_only):
    """b's whole prefix is being loaded by a's load: b's load_back has nothing of its own to
    load and returns at once, without waiting on a's copy (which runs only once somebody
    waits on it, so a wait would show as a finished load)."""
    cache, _, broken = host_only
    broken[0] = False
    orig = cache._load_layer_fn

    def gated(op):
        copy, go, wait = orig(op), threading.Event(), op.wait

        def waiting(timeout=None):
            go.set()
            return wait(timeout)
        op.wait = waiting

        def layer(i):
            go.wait(30)
            copy(i)
        return layer
    cache._load_layer_fn = gated
    a = cache.match(TOKENS)
    op = cache.load_back(a)
    b = cache.match(TOKENS)
    assert cache.load_back(b) is None and not op.done.is_set() and op in b.loads
    check_prefix(cache, b)                   # waits (opening the gate), then reads a's bytes
    cache.finish(a)
    cache.finish(b)
    cache.poll()


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective"])
def test_a_backup_that_ends_below_a_failed_backup_is_released(policy, tmp_path):
    """Write-through keeps host copies a prefix of every path. A parent's device->host copy
    fails after its child's was issued: the child's copy then ends below a node with no
    host copy, and is released like a failed one (slots idle, no host copy, BackupFinish
    ok=False, counted in backup_dropped); the strict HostTier monitor raises nothing.
    Before: the child kept a host copy under a parent without one (found by the stateful
    test under --hicache-verify=strict: WriteThroughPrefix at the child's BackupFinish)."""
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    from hicache.monitors.runtime import Monitor, VerifyConfig
    cache = HiCache(CacheConfig(page_size=PS, device_pages=8, host_pages=8, layers=2, heads=1, head_dim=2,
                                write_policy=policy))
    mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    rec = Recorder()
    cache.bus.subscribe(rec)
    orig = cache._copy_to_host

    def copy(op):
        if len(op.pages) == 1:             # the parent's copies (one page) fail
            raise CopyFailed("copy kernel failed")
        orig(op)
    cache._copy_to_host = copy
    parent = serve(cache, TOKENS[:2]).node                 # the parent: one page (served, finished)
    cache.drain()
    assert parent.host is None                             # (no copy yet, or a failed one)
    child = serve(cache, TOKENS).node                      # the child: two pages below it
    assert child.parent is parent
    cache.backup(child)                                    # both copies issued, parent first
    assert parent.host is not None and child.host is not None
    cache.drain()
    assert parent.host is None and child.host is None
    assert (cache.host.state == int(S.IDLE)).all()
    # (write_through started the parent's copy in the child's insert already: it may have
    # failed, and been issued again by backup(), before the child's)
    assert cache.metrics.backup_failures >= 1 and cache.metrics.backup_dropped == 1
    ends = [(e.args["node"], e.args.get("ok", True)) for e in rec.events if e.action == A.BackupFinish]
    assert ends[-2:] == [(parent.id, False), (child.id, False)] and set(ends) == {(parent.id, False), (child.id, False)}
    cache._copy_to_host = orig
    assert cache.backup(child) == 2                        # the copies work again: both backed up
    cache.drain()
    assert parent.host is not None and child.host is not None
    assert mon.checked == mon.steps > 5
    cache.close()


def test_a_backup_that_ends_below_a_parent_copy_issued_again_is_released(tmp_path):
    """Write-through, one transient failure: the parent's first copy fails, its copy is
    issued again, and the child's copy (issued between the two) ends while the parent's
    second copy is still in flight. The parent has no readable host copy then (HostTier's
    BackupFinish needs ParentBacked: finished, not started), so the child's copy is
    released; the parent's second copy lands. Before: the child became SYNCED below a
    parent still being written (a helper's review, after the first fix only tested for no
    host copy at all)."""
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    from hicache.monitors.runtime import Monitor, VerifyConfig
    cache = HiCache(CacheConfig(page_size=PS, device_pages=8, host_pages=8, layers=2, heads=1, head_dim=2,
                                metadata_only=True, write_policy="write_through"))
    mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    gates = [threading.Event() for _ in range(3)]
    calls = []
    orig = cache._copy_to_host

    def copy(op):                        # the writer thread runs the copies in issue order
        k = len(calls)
        calls.append(op)
        assert gates[k].wait(timeout=30)
        if k == 0:
            raise CopyFailed("copy kernel failed")
        orig(op)
    cache._copy_to_host = copy

    def serve_one(tokens):
        req = cache.match(tokens)
        cache.insert(req, cache.alloc(len(tokens) // PS - len(cache.prefix_pages(req))))
        cache.finish(req)
        return req.node
    parent = serve_one(TOKENS[:2])       # the parent's copy is issued (write_through: first hit)
    child = serve_one(TOKENS[:4])        # the child's, below it
    gates[0].set()
    assert cache.writer.acks[0].done.wait(timeout=30)
    cache.poll()                         # the parent's failure is applied
    assert parent.host is None and cache.metrics.backup_failures == 1
    assert cache.backup(parent) == 1     # issued again, after the child's
    gates[1].set()
    assert cache.writer.acks[0].done.wait(timeout=30)
    cache.poll()                         # the child's copy ends: the parent's is in flight
    assert child.host is None and cache.metrics.backup_dropped == 1
    gates[2].set()
    cache.drain()
    assert parent.host is not None and child.host is None
    assert (cache.host.state[parent.host] == int(S.SYNCED)).all()
    assert mon.checked == mon.steps > 5
    cache.close()


def test_a_layer_waiter_is_woken_when_the_load_fails(host_only):
    """The forward pass waits per layer (`wait_layer`); a load whose copy fails must wake a
    waiter already blocked on a layer it will never copy (it waited for good before: the
    worker set `done` without notifying the layer condition). Each layer's copy is held
    until the waiter is blocked again (its n-th wait), so the failure lands while it
    waits. Bounded: the waiter runs on a thread joined with a timeout, its own wait 30 s."""
    cache, _, _ = host_only
    waits = threading.Semaphore(0)
    failing = cache._load_layer_fn

    def gated_fn(op):
        copy = failing(op)

        def gated(layer):
            assert waits.acquire(timeout=30)     # the waiter is blocked (again)
            copy(layer)
        return gated
    cache._load_layer_fn = gated_fn

    class Watched(threading.Condition):
        def wait(self, timeout=None):
            waits.release()
            return super().wait(timeout)
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    op._cond = Watched()                         # (the worker is held before layer 0's copy)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(op.wait_layer(1, timeout=30)), daemon=True)
    waiter.start()
    waiter.join(20)
    assert not waiter.is_alive() and got == [False] and isinstance(op.error, CopyFailed)
    cache.poll()
