"""CPSharding refinement map over the real replicated tree (hicache.dist.cache_model).

`TreeDriver` performs the engine's metadata steps on one rank's tree in a seeded random
order (hicache.dist.engine: _plan's rotation choice, allocation and restore of a host run;
_insert with its host backup; the backup's completion; storage-prefetch inserts of host
pages), emitting the engine's events, with a strict monitor on the tree."""
import random

import pytest

from hicache.dist.cache_model import ReplicatedTree
from hicache.monitors.generated import cp_sharding as spec
from hicache.monitors.maps.cp_sharding import CPShardingMap, no_double_allocation_linear
from hicache.monitors.maps.steps import SequenceMonitor, Tee
from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
from hicache.protocol.cp_alloc import ShardedPageAllocator
from hicache.protocol.cp_layout import CPLayout
from hicache.protocol.events import EventRecorder
from hicache.tla.values import Fcn


class TreeDriver:
    def __init__(self, seed, vdir, cp=2, device=4, host=6, tree_cls=ReplicatedTree):
        self.rng = random.Random(seed)
        self.layout = CPLayout(cp_size=cp, page_size=2)
        self.events = EventRecorder()
        self.listener = Tee(self.events)
        self.tree = tree_cls(self.layout, device, host, self.listener)
        self.mon = SequenceMonitor(CPShardingMap(self.tree), VerifyConfig(mode="strict", violation_dir=vdir))
        self.listener.monitors.append(self.mon)
        self.backing: list = []
        self.rid = 0

    def emit(self, action, **f):
        self.listener(action, f)

    def plan(self):
        """Engine._plan for one request of 1..5 pages over a few shared prefixes; returns
        its insert (Engine._insert), run after every plan of the batch (as the engine does)."""
        rng, tree = self.rng, self.tree
        stem = rng.randrange(3)
        n = rng.randint(1, 5)
        pages = [(stem, i, rng.randrange(2) if i >= 2 else 0) for i in range(n)]
        keys = [repr(pages[:i + 1]) for i in range(len(pages))]
        self.rid += 1
        path = tree.match(pages)
        for x in path:
            x.lock += 1
        dev = 0
        while dev < len(path) and path[dev].device_page is not None:
            dev += 1
        host_run = []
        for x in path[dev:]:
            if x.host_page is None or x.backing_up:
                break
            host_run.append(x)
        if path:
            base = path[0].base
            self.emit("ChainExtend", rid=self.rid, base=base, start=dev)
        else:
            base = tree.device.new_chain_base()
            self.emit("ChainAllocate", rid=self.rid, base=base)
        got = tree.alloc_device(base, dev, n - dev) if n > dev else []
        if got is None:
            got, host_run = [], []
        for x, p in zip(host_run, got):
            x.device_page = p
        for x in host_run:
            self.emit("OwnerRestore", rank=0, key=x.key, owner=self.layout.page_owner(x.device_page))
        c = dev + len(host_run)
        new = got[len(host_run):]

        def insert():
            if new:
                parent = path[c - 1] if c else tree.root
                nodes = tree.insert(parent, c, pages[c:], keys[c:], base, device_pages=new)
                for j, x in enumerate(nodes):
                    if x.device_page == new[j] and x.host_page is None and not x.backing_up:
                        h = tree.alloc_host(x.base, x.position)
                        if h is not None:
                            x.host_page, x.backing_up = h, True
                            self.backing.append(x)
            for x in path:
                x.lock -= 1
        return insert

    def batch(self):
        inserts = [self.plan() for _ in range(self.rng.randint(1, 2))]
        for ins in inserts:
            ins()

    def backup_done(self):
        if self.backing:
            x = self.backing.pop(0)
            x.backing_up = False
            self.emit("OwnerBackup", rank=0, key=x.key, owner=self.layout.page_owner(x.host_page))

    def prefetch(self):
        """Engine._admit_one + _complete_prefetches: host pages of a storage hit, inserted."""
        rng, tree = self.rng, self.tree
        pages = [(3, i, 0) for i in range(rng.randint(1, 3))]
        keys = [repr(pages[:i + 1]) for i in range(len(pages))]
        path = tree.match(pages)
        start = len(path)
        if start == len(pages):
            return
        base = path[-1].base if path else tree.device.new_chain_base()
        hosts = []
        for p in range(start, len(pages)):
            h = tree.alloc_host(base, p)
            if h is None:
                break
            hosts.append(h)
        if hosts:
            tree.insert(path[-1] if path else tree.root, start, pages[start:start + len(hosts)],
                        keys[start:start + len(hosts)], base, host_pages=hosts)

    def run(self, steps):
        for _ in range(steps):
            r = self.rng.random()
            if r < 0.55:
                self.batch()
            elif r < 0.85:
                self.backup_done()
            else:
                self.prefetch()


@pytest.mark.parametrize("seed", range(12))
def test_clean_tree_runs_raise_nothing(seed, tmp_path):
    d = TreeDriver(seed, str(tmp_path), cp=2 + seed % 2)
    d.run(60)
    assert d.mon.checked == d.mon.steps > 20
    names = set(d.events.names())
    assert {"ChainAllocate", "PageEvict", "OwnerBackup"} <= names


def test_the_map_action_checks_allocations_evictions_and_backups(tmp_path):
    """Over many seeds every action-checked kind of step occurs and passes its check."""
    seen = set()
    for seed in range(12):
        d = TreeDriver(seed, str(tmp_path))
        orig = d.mon._check_step

        def spy(name, fields, steps, s, t, orig=orig, d=d):
            seen.update(a for a, p, _ in d.mon.rmap.trail if p is not None)
            return orig(name, fields, steps, s, t)
        d.mon._check_step = spy
        d.run(60)
    assert {"ChainAllocate", "ChainExtend", "PageEvict", "OwnerBackup"} <= seen


class WrongOwnerAllocator(ShardedPageAllocator):
    """The fault: the last page of a chain segment of 3+ pages comes from the next class."""
    fired = False

    def alloc_chain(self, rotation_base, start_position, count):
        pages = super().alloc_chain(rotation_base, start_position, count)
        if pages and count >= 3 and not WrongOwnerAllocator.fired:
            n = self.layout.cp_size
            cls = (self.layout.page_owner(pages[-1]) + 1) % n
            if self._free[cls]:
                import heapq
                self.free(pages[-1])
                pages[-1] = self.layout.logical_page(cls, heapq.heappop(self._free[cls]))
                self._allocated.add(pages[-1])
                WrongOwnerAllocator.fired = True
        return pages


class WrongOwnerTree(ReplicatedTree):
    def __init__(self, layout, device, host, listener):
        super().__init__(layout, device, host, listener)
        self.device = WrongOwnerAllocator(layout, device)


def test_a_page_on_the_wrong_owner_is_caught_at_its_allocation(tmp_path):
    for seed in range(20):
        WrongOwnerAllocator.fired = False
        d = TreeDriver(seed, str(tmp_path), tree_cls=WrongOwnerTree)
        try:
            d.run(60)
        except ProtocolViolation as e:
            assert WrongOwnerAllocator.fired
            last = d.events.events[-1]
            assert e.action == last[0] and "allocation" in e.arguments     # the allocation's event
            if e.kind == "action":      # a new chain's page by page check: not the lowest free page of its class
                assert (e.property, e.location) == ("ChainExtend", "spec/CPSharding.tla:151:5")
            else:                       # an extension's segment: the invariant after the allocation
                assert (e.property, e.location) == ("PositionOwner", "spec/CPSharding.tla:235:5")
            return
        assert not WrongOwnerAllocator.fired, "a misplaced page went unnoticed"
    pytest.fail("the fault never fired")


class AnyRotationTree(ReplicatedTree):
    """The fault: the tree accepts a splice of another rotation (CPSharding_bug)."""

    def insert(self, parent, start, pages, keys, base, **kw):
        import hicache.dist.cache_model as cm
        orig = cm.rotation_compatible
        cm.rotation_compatible = lambda a, b, n: True
        try:
            return super().insert(parent, start, pages, keys, base, **kw)
        finally:
            cm.rotation_compatible = orig


def test_a_splice_of_two_rotations_is_caught_at_the_insert(tmp_path):
    for seed in range(30):
        d = TreeDriver(seed, str(tmp_path), tree_cls=AnyRotationTree)
        try:
            d.run(60)
        except ProtocolViolation as e:
            # at the insert that accepted it; the spliced chain's pages also break
            # PositionOwner, which the monitor evaluates first
            assert (e.kind, e.action) == ("invariant", "ChainExtend") and "inserted" in e.arguments
            assert e.property in ("PositionOwner", "SpliceRotationsAgree")
            assert e.diff["mixed"] == (False, True)
            f = spec.inv_SpliceRotationsAgree(d.mon.constants(), d.mon.rmap.state())
            assert (f.property, f.text, f.location) == ("SpliceRotationsAgree", "~mixed", "spec/CPSharding.tla:246:25")
            return
    pytest.fail("no seed spliced two rotations")


def test_the_linear_no_double_allocation_agrees_with_the_generated_check(tmp_path):
    rng = random.Random(5)
    checked = 0
    for seed in range(6):
        d = TreeDriver(seed, str(tmp_path))
        for _ in range(40):
            d.run(1)
            C = d.mon.constants()
            s = d.mon.rmap.state()
            for mutate in range(4):
                t = dict(s)
                if mutate:
                    rows = list(t["page"])
                    c = rng.randrange(len(rows))
                    row = dict(rows[c].d)
                    P = rng.randrange(len(row))
                    row[P] = rng.choice([-1, *sorted(C["PageIds"])])
                    rows[c] = Fcn(row)
                    t["page"] = tuple(rows)
                    if mutate == 3:
                        t["free"] = frozenset(list(t["free"])[1:])
                gen = spec.inv_NoDoubleAllocation(C, t)
                lin = no_double_allocation_linear(C, t)
                assert (gen and (gen.property, gen.index)) == (lin and (lin.property, lin.index))
                checked += 1
    assert checked == 6 * 40 * 4


def test_growing_chains_and_lengths_re_dimension_without_alarms(tmp_path):
    """Chains and MaxLen start at 8 and double; the step at which they grow is checked on
    the pre-state padded to the new shape."""
    d = TreeDriver(3, str(tmp_path), cp=2, device=12, host=20)
    resized = []
    orig = d.mon._check_step

    def spy(*a):
        resized.extend(e for e in d.mon.rmap.trail if e[0] == "(capacity)")
        return orig(*a)
    d.mon._check_step = spy
    d.run(150)
    assert d.mon.rmap.n_chains > 8 and resized
    assert d.mon.checked == d.mon.steps
