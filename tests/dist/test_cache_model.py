"""The replicated tree and the copy queues, in one process (no collectives)."""
import pytest
import torch

from hicache.dist.cache_model import ReplicatedTree
from hicache.dist.topology import Topology
from hicache.dist.transfers import CopyEngine, PageCopy, Transfer, TransferKind, TransferQueue
from hicache.dist.errors import LocalTimeout
from hicache.protocol.cp_layout import CPLayout
from hicache.protocol.events import EventRecorder


def _pages(n, start=0):
    return [(start + i,) for i in range(n)]


def _keys(n, tag):
    return [f"{tag}{i}" for i in range(n)]


def test_insert_keeps_rotation_and_rejects_a_splice_of_another_base():
    rec = EventRecorder()
    lay = CPLayout(cp_size=2, page_size=1)
    tree = ReplicatedTree(lay, device_pages_per_rank=8, host_pages_per_rank=8, listener=rec)
    a = tree.device.alloc_chain(0, 0, 3)
    nodes = tree.insert(tree.root, 0, _pages(3), _keys(3, "a"), 0, device_pages=a)
    assert [lay.page_owner(n.device_page) for n in nodes] == [0, 1, 0]
    # A second request computed the same prefix on base 1 before seeing the first insert.
    b = tree.device.alloc_chain(1, 0, 4)
    got = tree.insert(tree.root, 0, _pages(4), _keys(4, "a"), 1, device_pages=b)
    assert got == nodes                      # shared pages deduplicated; the tail declined
    assert tree.rejected_inserts == 1 and rec.count("InsertReject") == 1
    assert tree.device.allocated() == frozenset(a)    # b's pages all freed again
    # Extending with the same base is accepted and keeps the rotation.
    c = tree.device.alloc_chain(0, 3, 1)
    ext = tree.insert(nodes[-1], 3, [(3,)], ["a3"], 0, device_pages=c)
    assert lay.page_owner(ext[0].device_page) == (0 + 3) % 2


def test_eviction_is_lru_and_respects_locks_loads_and_backups():
    lay = CPLayout(cp_size=1, page_size=1)
    tree = ReplicatedTree(lay, device_pages_per_rank=2, host_pages_per_rank=4)
    p = tree.device.alloc_chain(0, 0, 2)
    n0, n1 = tree.insert(tree.root, 0, _pages(2), _keys(2, "k"), 0, device_pages=p)
    n0.host_page, n1.host_page = tree.host.alloc_chain(0, 0, 2)
    n1.backing_up = True                         # its backup is in flight: not evictable
    assert tree.alloc_device(0, 0, 1) is None    # n0 has a device child; n1 is backing up
    n1.backing_up = False
    n1.lock = 1
    assert tree.alloc_device(0, 0, 1) is None    # locked
    n1.lock = 0
    victim_page = n1.device_page
    assert tree.alloc_device(0, 0, 1) == [victim_page]              # the LRU leaf gave its page
    assert n1.device_page is None and n1.host_page is not None     # device copy dropped, host kept


def test_host_eviction_never_frees_the_source_of_a_pending_load():
    lay = CPLayout(cp_size=1, page_size=1)
    tree = ReplicatedTree(lay, device_pages_per_rank=2, host_pages_per_rank=1)
    h = tree.host.alloc_chain(0, 0, 1)
    (n,) = tree.insert(tree.root, 0, _pages(1), ["x"], 0, host_pages=h)
    n.device_page = tree.device.alloc_chain(0, 0, 1)[0]
    n.loading = object()                         # a load reads n.host_page right now
    assert tree.alloc_host(0, 1) is None
    n.loading = None
    assert tree.alloc_host(0, 1) == h[0]         # now its host copy may go
    assert n.host_page is None and n.device_page is not None


def test_digest_covers_allocator_state():
    lay = CPLayout(cp_size=2, page_size=1)
    a, b = ReplicatedTree(lay, 4, 4), ReplicatedTree(lay, 4, 4)
    assert a.digest() == b.digest()
    a.device.alloc_chain(0, 0, 1)                # allocated on one rank only (bug 4)
    assert a.digest() != b.digest()


def test_transfer_queue_pops_exactly_and_checks_bytes():
    src = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)   # [layers, pages, payload]
    dst = torch.zeros_like(src)
    q = TransferQueue(TransferKind.LOAD)
    engine = CopyEngine(rank=0, seed=0, threads=2, max_delay_s=0.0)
    ts = [Transfer(i, TransferKind.LOAD, 2, [PageCopy(src, i, dst, i)]) for i in range(3)]
    assert not ts[0].bytes_match()               # nothing copied yet: applying now would be a violation
    for t in ts:
        q.push(t)
        engine.submit(t)
    popped = q.pop(3, "check", 0, timeout_s=5.0)
    assert [t.tid for t in popped] == [0, 1, 2] and all(t.bytes_match() for t in popped)
    assert torch.equal(dst, src)
    with pytest.raises(RuntimeError, match="only 0 issued"):
        q.pop(1, "check", 0, timeout_s=0.1)
    engine.close()


def test_transfer_queue_leading_ready_and_bounded_wait():
    q = TransferQueue(TransferKind.BACKUP)
    ts = [Transfer(i, TransferKind.BACKUP, 1, []) for i in range(3)]
    for t in ts:
        q.push(t)
    ts[1].done.set()
    assert q.leading_ready() == 0
    ts[0].done.set()
    assert q.leading_ready() == 2
    q.pop(2, "check", 0, timeout_s=1.0)
    with pytest.raises(LocalTimeout, match="transfer 2 did not finish"):
        q.pop(1, "check#7", 3, timeout_s=0.05)


def test_topology_layout():
    t = Topology(cp=2, pp=3, rank=5)
    assert (t.stage, t.cp_rank, t.prev_rank, t.next_rank) == (2, 1, 3, None)
    assert Topology(cp=2, pp=3, rank=1).stage_ranks(1) == [2, 3]
    with pytest.raises(ValueError, match="rank"):
        Topology(cp=2, pp=1, rank=2)


def test_a_failed_copy_wakes_its_waiters_and_fails_the_pop():
    """A copy that raises on its copy thread marks the transfer failed and sets its events (no
    wait runs into the timeout); popping it raises a step error naming the transfer, and the
    engine's `raise_failures` reports it at the next check. A listener's violation after a
    completed copy is raised as itself."""
    from hicache.dist.errors import DistStepError
    src = torch.zeros(2, 2, 2)
    dst = torch.zeros(2, 1, 2)
    q = TransferQueue(TransferKind.LOAD)
    engine = CopyEngine(rank=3, seed=0, threads=1, max_delay_s=0.0)
    bad = Transfer(7, TransferKind.LOAD, 2, [PageCopy(src, 1, dst, 5)])      # page 5: out of range
    q.push(bad)
    engine.submit(bad)
    assert bad.done.wait(5.0) and all(ev.is_set() for ev in bad.layer_done)
    assert isinstance(bad.error, IndexError)
    with pytest.raises(DistStepError, match="load transfer 7 failed on its copy thread"):
        q.pop(1, "cache_check#2", 3, timeout_s=5.0)
    with pytest.raises(DistStepError, match="rank 3: step 'cache_check#3'"):
        engine.raise_failures("cache_check#3")
    engine.close()

    class Violation(AssertionError):
        pass

    def listener(action, fields):
        raise Violation(f"{action} {fields['tid']}")
    engine = CopyEngine(rank=0, seed=0, threads=1, max_delay_s=0.0, listener=listener)
    ok = Transfer(1, TransferKind.BACKUP, 2, [PageCopy(src, 0, dst, 0)])
    engine.submit(ok)
    assert ok.done.wait(5.0)
    engine.close()
    for th in engine._threads:
        th.join(5.0)
    assert ok.error is None and torch.equal(dst[:, 0], src[:, 0])     # the copy itself held
    with pytest.raises(Violation, match="TransferComplete 1"):
        engine.raise_failures("cache_check#1")
