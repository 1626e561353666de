"""In-process stand-ins for hicache.dist.comm.Comm: ranks are threads of one process.

`World` holds the groups; `FakeComm(world, rank)` offers what pp_sync and PrefetchWorker
call (min_reduce / checked_min / raise_unless_agreed / next_step / send_vec / recv_vec,
topo, cp_group, prefetch_group, rank). A group's reduction pairs the k-th call of every
member (a barrier), exactly like a collective; point-to-point sends are per (src, dst)
FIFO queues. Only the transport is fake: the protocol code under test is the real one.
"""
from __future__ import annotations

import queue
import threading

import torch

from hicache.dist.errors import DivergenceError
from hicache.dist.topology import Topology
from hicache.protocol.digest import step_code
from hicache.protocol.pp_sync import SyncLayout


class Group:
    def __init__(self, members: list[int]):
        self.members = members
        self._vecs: dict[int, list[int]] = {}
        self._out: list[int] = []
        self._barrier = threading.Barrier(len(members), action=self._reduce, timeout=10)

    def _reduce(self) -> None:
        vecs = list(self._vecs.values())
        self._out = [min(col) for col in zip(*vecs)]
        self._vecs = {}

    def all_reduce_min(self, rank: int, vec: list[int]) -> list[int]:
        self._vecs[rank] = vec
        self._barrier.wait()
        out = list(self._out)
        self._barrier.wait()        # nobody starts the next reduction before all read this one
        return out


class World:
    def __init__(self, cp: int, pp: int):
        self.cp, self.pp = cp, pp
        n = cp * pp
        self.stage_groups = [Group([s * cp + c for c in range(cp)]) for s in range(pp)]
        self.world_group = Group(list(range(n)))
        self.links: dict[tuple[int, int], queue.Queue] = {}
        self._lock = threading.Lock()

    def abort(self) -> None:
        """A rank failed: every rank waiting in a collective fails too (no hang)."""
        for g in (*self.stage_groups, self.world_group):
            g._barrier.abort()

    def link(self, src: int, dst: int) -> queue.Queue:
        with self._lock:
            return self.links.setdefault((src, dst), queue.Queue())


class FakeComm:
    def __init__(self, world: World, rank: int):
        self.world, self.rank = world, rank
        self.topo = Topology(cp=world.cp, pp=world.pp, rank=rank)
        self._seq: dict[str, int] = {}

    @property
    def cp_group(self) -> Group:
        return self.world.stage_groups[self.topo.stage]

    @property
    def prefetch_group(self) -> Group:
        return self.world.world_group

    def next_step(self, name: str):
        seq = self._seq.get(name, 0)
        self._seq[name] = seq + 1
        return f"{name}#{seq}", step_code(name, seq)

    def min_reduce(self, name, group, digest, counts, votes=()):
        label, code = self.next_step(name)
        layout = SyncLayout(len(counts), len(votes))
        vec = group.all_reduce_min(self.rank, layout.encode(code, digest, counts, list(votes)))
        return label, code, torch.tensor(vec, dtype=torch.int64), layout.decode(vec)

    def raise_unless_agreed(self, label, group, out, code, digest) -> None:
        if not (out.step_agreed and out.digest_agreed):
            raise DivergenceError(label, self.rank, "ranks disagree")

    def checked_min(self, name, group, digest, counts, votes=()):
        label, code, _, out = self.min_reduce(name, group, digest, counts, votes)
        self.raise_unless_agreed(label, group, out, code, digest)
        return out

    def send_vec(self, label, vec, dst) -> None:
        self.world.link(self.rank, dst).put(vec.clone())

    def recv_vec(self, label, vec, src) -> None:
        vec.copy_(self.world.link(src, self.rank).get(timeout=10))


def run_ranks(n: int, fn, world: World | None = None) -> list:
    """fn(rank) on n threads; re-raises the first exception that is not a broken barrier
    (a rank that failed aborts the world's collectives, so the others fail after it)."""
    out: list = [None] * n
    errs: list = [None] * n

    def body(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errs[r] = e
            if world is not None:
                world.abort()
    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    first = [e for e in errs if e is not None and not isinstance(e, threading.BrokenBarrierError)]
    if first:
        raise first[0]
    for e in errs:
        if e is not None:
            raise e
    return out
