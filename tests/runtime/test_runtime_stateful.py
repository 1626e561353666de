"""Random request streams against the real cache; rules are the HostTier actions.

After every step: the tree's structural invariants hold; every host slot is in exactly
one of {free, tree, in-flight} and its state matches; device pages are free or in the tree;
every byte on device, host and storage equals what was written for that token prefix.
Transfers run on the real threads, so completions interleave with the rules freely.
"""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from runtime_support import Fault, MemStorage, stamp
from runtime_helpers import compute
from hicache.protocol.vocabulary import HostTier
from hicache.runtime.allocator import HostSlotState as S
from hicache.runtime.cache import HiCache
from hicache.runtime.config import CacheConfig, WritePolicy
from hicache.storage import keys as storage_keys

PS = 2
DEVICE, HOST = 4, 10
# prompts that share prefixes (and split each other's nodes), cut at a random page
BASE = [[0, 0, 1, 1, 2, 2, 0, 1, 2, 0], [0, 0, 1, 1, 0, 0, 2, 2, 1, 1],
        [0, 0, 2, 1, 2, 2, 0, 1, 2, 0], [1, 1, 1, 1, 2, 2, 2, 2, 0, 0]]
TOKENS = st.builds(lambda b, n: BASE[b][:n * PS], st.integers(0, len(BASE) - 1),
                   st.integers(1, len(BASE[0]) // PS))
PICK = st.integers(0, 7)
MAX_ACTIVE = 3


class HostTierMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cache: HiCache | None = None
        self.reqs = []
        self.storage = MemStorage()
        self.expected: dict[str, torch.Tensor] = {}   # storage key -> page bytes

    @initialize(policy=st.sampled_from(list(WritePolicy)), warm=st.lists(TOKENS, max_size=4))
    def start(self, policy, warm):
        self.cache = HiCache(CacheConfig(page_size=PS, device_pages=DEVICE, host_pages=HOST,
                                         layers=2, heads=1, head_dim=2, storage_batch_pages=2,
                                         write_policy=policy, prefetch_policy="wait_complete",
                                         storage_backup_host_fraction=0.5,
                                         model="stateful"), storage=self.storage)
        self.nbytes = self.cache.device_pool.page_nbytes
        self.dropped_only_copy = []
        self._copy_faults()
        if policy is WritePolicy.WRITE_BACK:
            def watch(action, fields):
                if action is HostTier.DeviceEvict and not fields["kept_host"]:
                    self.dropped_only_copy.append(fields["node"])
            self.cache.bus.subscribe(watch)
        for tokens in warm:     # earlier traffic: served whole, then evicted to host
            self.RequestMatch(tokens, load=True, fetch=True, compute=True)
            self.RequestFinish(len(self.reqs) - 1)
        self.cache.evict_device(DEVICE)

    def _copy_faults(self) -> None:
        """Copies that fail while `self.failing` names their kind: a load-back's second layer
        (its first landed), a backup's whole copy (the real copy functions otherwise)."""
        self.failing: set = set()
        cache = self.cache
        load_fn, to_host = cache._load_layer_fn, cache._copy_to_host

        def loads(op):
            copy = load_fn(op)

            def layer(i):
                if "load" in self.failing and i == 1:
                    raise RuntimeError("load copy failed")
                copy(i)
            return layer

        def backup(op):
            if "backup" in self.failing:
                raise RuntimeError("backup copy failed")
            to_host(op)
        cache._load_layer_fn, cache._copy_to_host = loads, backup

    def teardown(self):
        if self.cache is not None:
            for req in self.reqs:
                self.cache.abort(req)
            self.cache.close()

    def _req(self, i):
        return self.reqs[i % len(self.reqs)]

    def _wait(self, worker):
        if worker is not None and worker.acks:
            worker.acks[0].done.wait()
        self.cache.poll()

    # -- rules: one per HostTier action ----------------------------------------
    @precondition(lambda self: len(self.reqs) < MAX_ACTIVE)
    @rule(tokens=TOKENS, load=st.booleans(), fetch=st.booleans(), compute=st.booleans())
    def RequestMatch(self, tokens, load, fetch, compute):
        """A request arrives; a scheduler may then load its host run, start its
        prefetch and compute its pages at once (each also a rule of its own)."""
        req = self.cache.match(tokens)
        self.reqs.append(req)
        if load:
            self.cache.load_back(req)
        if fetch:
            self.cache.prefetch(req)
        if compute:
            self.DeviceInsert(len(self.reqs) - 1)

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def LoadBackStart(self, i):
        self.cache.load_back(self._req(i))

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def DeviceInsert(self, i):
        req = self._req(i)
        if req.prefetch is not None:
            self.cache.finish_prefetch(req)
        compute(self.cache, req)           # checks every prefix byte before writing
        seed = self.cache.tree.seed
        toks = list(memoryview(req.key).cast("q"))
        for p, h in enumerate(storage_keys.chain(seed, toks, PS)):
            self.expected[h.hex()] = stamp(req.key, p, self.nbytes, PS)

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def BackupStart(self, i):
        self.cache.backup(self._req(i).node)

    @rule()
    def BackupFinish(self):
        self._wait(self.cache.writer)

    @rule()
    def LoadBackFinish(self):
        self._wait(self.cache.loader)

    @rule()
    def StorageBackupFinish(self):
        self._wait(self.cache.backuper)

    @rule(n=st.integers(1, DEVICE))
    def DeviceEvict(self, n):
        self.cache.evict_device(n)

    @rule(n=st.integers(1, HOST))
    def HostEvict(self, n):
        self.cache.evict_host(n)

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def PrefetchStart(self, i):
        self.cache.prefetch(self._req(i))

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def PrefetchFinish(self, i):
        req = self._req(i)
        if self.cache.finish_prefetch(req):
            self.cache.load_back(req, _tier="storage")

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def RequestFinish(self, i):
        req = self._req(i)
        self.reqs.remove(req)
        self.cache.finish(req)

    @precondition(lambda self: self.reqs)
    @rule(i=PICK)
    def RequestAbort(self, i):
        req = self._req(i)
        self.reqs.remove(req)
        self.cache.abort(req)

    @rule(fault=st.sampled_from([Fault.NONE, Fault.NONE, Fault.RAISE, Fault.NONE_VALUE]))
    def storage_fault(self, fault):
        self.storage.fault = fault

    @rule(kinds=st.sampled_from([(), (), ("load",), ("backup",), ("load", "backup")]))
    def copy_fault(self, kinds):
        """Copies fail from now on (a failed load-back fills nothing, a failed backup
        releases its slots): the invariants below check no byte of either is served."""
        self.failing = set(kinds)

    # -- invariants ------------------------------------------------------------
    @invariant()
    def tree_is_well_formed(self):
        if self.cache is not None:
            self.cache.tree.check()

    @invariant()
    def every_host_slot_is_free_tree_or_in_flight(self):
        if self.cache is None:
            return
        free, tree, inflight = self.cache.host_partition()
        assert not (free & tree) and not (free & inflight) and not (tree & inflight)
        assert free | tree | inflight == set(range(HOST))
        # in flight means: held by a live request's prefetch or an aborted one not yet reaped
        held = {s for r in self.reqs if r.prefetch is not None for s in r.prefetch.slots}
        held |= {s for op in self.cache._orphans for s in op.slots}
        assert inflight == held, f"leaked in-flight slots {sorted(inflight - held)}"
        st_ = self.cache.host.state
        assert all(st_[s] == S.IDLE for s in free)
        assert all(st_[s] == S.RESERVED for s in inflight)
        assert all(st_[s] != S.IDLE for s in tree)

    @invariant()
    def write_back_never_drops_an_only_copy(self):
        if self.cache is not None:
            assert self.dropped_only_copy == []

    @invariant()
    def every_device_page_is_free_or_in_tree(self):
        if self.cache is None:
            return
        free = self.cache.dev_alloc.free_set()
        used = [p for x in self.cache.tree.nodes() if x.device is not None for p in x.device]
        assert len(used) == len(set(used)) and not (free & set(used))
        assert free | set(used) == set(range(DEVICE))

    @invariant()
    def every_byte_equals_what_was_written(self):
        if self.cache is None:
            return
        c = self.cache
        tree = c.tree
        for x in list(tree.nodes()):
            path = tree.path(x)
            full = b"".join(y.key for y in path)
            first = sum(y.n for y in path[:-1])
            if x.device is not None and x.loading is None:
                for i, p in enumerate(x.device):
                    assert torch.equal(c.device_pool.read_page(p), stamp(full, first + i, self.nbytes, PS))
            if x.host is not None and not c.host.all_in(x.host, S.RESERVED):
                assert not (c.host.state[x.host] == S.RESERVED).any()
                for i, s in enumerate(x.host):
                    assert torch.equal(c.host_pool.read_page(s), stamp(full, first + i, self.nbytes, PS))
        for k, v in dict(self.storage.data).items():
            assert torch.equal(v, self.expected[k]), f"storage page {k[:12]} differs"


HostTierMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestHostTier = HostTierMachine.TestCase
