"""Stateful: a faulty file store behind SafeStorage against a model of what was written.

Whatever faults fire, a hit is always the exact page of its key, and `batch_exists` never
counts a key that no `batch_set` was asked to store.
"""
from __future__ import annotations

import shutil
import tempfile

import torch
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from hicache.storage.faulty import FaultConfig, FaultyStorage
from hicache.storage.file_store import FileStorage
from hicache.storage.safe import SafeStorage

N_KEYS, WIDTH = 6, 24
KEYS = [f"{i:064x}" for i in range(N_KEYS)]


def page_of(i: int) -> torch.Tensor:
    return torch.arange(WIDTH, dtype=torch.uint8) * (i + 3) % 251


key_lists = st.lists(st.integers(0, N_KEYS - 1), min_size=1, max_size=N_KEYS, unique=True)


class FaultyStoreMachine(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**16))
    def open(self, seed: int) -> None:
        self.root = tempfile.mkdtemp(prefix="hicache-stateful-")
        config = FaultConfig(seed=seed, p_raise=0.2, p_none=0.2, p_corrupt=0.2, p_drop_write=0.2)
        self.store = SafeStorage(FaultyStorage(FileStorage(self.root), config))
        self.requested: set[int] = set()      # keys some batch_set was asked to store
        self.host = torch.zeros(N_KEYS, WIDTH, dtype=torch.uint8)

    @rule(ids=key_lists)
    def batch_set(self, ids: list[int]) -> None:
        flags = self.store.batch_set([KEYS[i] for i in ids], [page_of(i) for i in ids])
        assert len(flags) == len(ids)
        self.requested.update(ids)

    @rule(ids=key_lists)
    def batch_set_from(self, ids: list[int]) -> None:
        src = torch.stack([page_of(i) for i in ids])
        self.store.batch_set_from([KEYS[i] for i in ids], src, list(range(len(ids))))
        self.requested.update(ids)

    @rule(ids=key_lists)
    def batch_get(self, ids: list[int]) -> None:
        for i, val in zip(ids, self.store.batch_get([KEYS[i] for i in ids])):
            assert val is None or torch.equal(val, page_of(i))

    @rule(ids=key_lists)
    def batch_get_into(self, ids: list[int]) -> None:
        ok = self.store.batch_get_into([KEYS[i] for i in ids], self.host, list(range(len(ids))))
        for row, (i, hit) in enumerate(zip(ids, ok)):
            assert not hit or torch.equal(self.host[row], page_of(i))

    @rule(ids=key_lists)
    def batch_exists(self, ids: list[int]) -> None:
        n = self.store.batch_exists([KEYS[i] for i in ids])
        assert 0 <= n <= len(ids)
        assert set(ids[:n]) <= self.requested

    @invariant()
    def counters_balance(self) -> None:
        if hasattr(self, "store"):
            stats = self.store.stats()
            assert stats.get("call_error", 0) == stats.get("fault_raise", 0)
            assert stats.get("call_none", 0) == stats.get("fault_none", 0)

    def teardown(self) -> None:
        if hasattr(self, "root"):
            shutil.rmtree(self.root, ignore_errors=True)


FaultyStoreMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=15,
                                                derandomize=True, deadline=None)
test_faulty_store_machine = FaultyStoreMachine.TestCase
