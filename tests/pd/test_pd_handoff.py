"""Prefill-decode handoff between two engines in separate processes (gloo): random tier
splits, delays and aborts leak no page on either side, and decode reads exactly the prefill
KV; the seeded faults are named by the spec property they break."""
from __future__ import annotations

import random

import torch

from hicache.dist.launch import launch
from hicache.dist.pd_handoff import Case, cache_config, cache_config_page_nbytes, log_events, pd_rank, stamp
from hicache.runtime import pd_handoff as pd

N_PAGES = 6


def _case(seed: int, plan: pd.Plan | None = None, d: int | None = None, h: int | None = None,
          slots: int | None = None) -> Case:
    rng = random.Random(seed)
    tokens = tuple(rng.randrange(1 << 20) for _ in range(N_PAGES * cache_config().page_size))
    return Case(plan or pd.Plan.random(seed, N_PAGES), tokens,
                rng.randint(0, 2) if d is None else d, rng.randint(0, 2) if h is None else h,
                rng.choice([3, 6, 8]) if slots is None else slots)


def _run(cases, tmp_path, faults=()):
    res = launch(pd_rank, 2, {"cases": cases, "store_dir": str(tmp_path), "faults": list(faults)},
                 timeout_s=120)
    out = []
    for k, case in enumerate(cases):
        p, d = res[0][k], res[1][k]
        events = pd.merge(log_events(p["log"]), log_events(d["log"]))
        out.append((case, p, d, events))
    return out


def _wrong_reads(case, reads) -> list[int]:
    nb = cache_config_page_nbytes()
    ps = cache_config().page_size
    return [i for i, b in sorted(reads.items())
            if torch.frombuffer(bytearray(b), dtype=torch.uint8).ne(stamp(list(case.tokens), i, nb, ps)).any()]


def test_random_handoffs_leak_nothing_and_read_the_prefill_kv(tmp_path):
    cases = [_case(s) for s in range(32)]
    outcomes = set()
    for case, p, d, events in _run(cases, tmp_path):
        assert p["leaks"] == {"locks": 0, "device_pages": 0, "host_slots": 0}, (case, p["leaks"])
        assert d["leaks"] == {"pages": 0, "owned": 0, "writes_to_free": 0}, (case, d["leaks"])
        assert _wrong_reads(case, d["reads"]) == [], case
        assert pd.check(events) == [], case
        # the two sides agree on whether it finished (aborts may cross: each then names itself)
        assert (p["outcome"] == "done") == (d["outcome"] == "done"), case
        if d["outcome"] == "done":
            assert sorted(d["reads"]) == list(range(N_PAGES))
        # reads are a prefix: decode reads pages in order, only landed ones
        assert sorted(d["reads"]) == list(range(len(d["reads"])))
        outcomes.add(d["outcome"])
        sends = [e for e in events if e.action == "PrefillSend"]
        loads = {e.page for e in events if e.action == "PrefillLoadBack" and e.info["tier"] == "device"}
        for e in sends:
            assert e.info["tier"] == "device" and (e.page <= case.device_pages or e.page in loads)
    # the seeds cover every ending
    assert outcomes == {"done", "aborted_by_prefill", "aborted_by_decode"}


def test_fault_send_before_load_back(tmp_path):
    case = _case(100, pd.Plan(seed=100, window=1), d=1, h=2, slots=8)
    [(case, p, d, events)] = _run([case], tmp_path, faults=["send_before_load_back"])
    assert pd.check(events) == ["SendAfterLoadBack"]
    assert _wrong_reads(case, d["reads"]) == [1]      # the first host page went out unloaded
    assert p["leaks"] == {"locks": 0, "device_pages": 0, "host_slots": 0}


def test_fault_abort_frees_in_flight(tmp_path):
    # decode asks for 3 pages, reads one, aborts: pages 2 and 3 are in flight
    case = _case(101, pd.Plan(seed=101, decode_abort_at=1, window=3), d=2, h=1, slots=8)
    [(case, p, d, events)] = _run([case], tmp_path, faults=["abort_frees_in_flight"])
    assert pd.check(events) == ["InFlightDestOwned"]
    assert d["outcome"] == "aborted_by_decode"
    assert d["leaks"]["writes_to_free"] == 0        # the pool never saw the write: dropped
    received = [e.page for e in events if e.action == "DecodeReceive" and not e.info["owned"]]
    assert received == [2, 3]


def test_faults_off_by_default():
    assert not pd.Faults.send_before_load_back and not pd.Faults.abort_frees_in_flight
