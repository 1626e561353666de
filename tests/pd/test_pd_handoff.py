"""Prefill-decode handoff between two engines: random tier splits, delays and aborts leak no
page on either side, decode reads exactly the prefill KV, and the generated PDHandoff monitor
(strict) accepts every step of the merged log; each seeded fault is named by the monitor at
the step that commits it."""
from __future__ import annotations

import random
import threading

import pytest
import torch

from hicache.dist.launch import launch
from hicache.dist.pd_handoff import (CacheSource, Case, DecodePool, cache_config, cache_config_page_nbytes,
                                     log_events, pd_rank, stamp)
from hicache.monitors.maps.pd_handoff import check_handoff
from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
from hicache.runtime import pd_handoff as pd

N_PAGES = 6
CLEAN_LEAKS = ({"locks": 0, "device_pages": 0, "host_slots": 0}, {"pages": 0, "owned": 0, "writes_to_free": 0})


@pytest.fixture(autouse=True)
def _faults_off():
    yield
    for name in ("send_before_load_back", "abort_frees_in_flight", "decode_leaks_on_abort",
                 "prefill_leaks_on_abort"):
        setattr(pd.FAULTS, name, False)


def _tokens(seed: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(1 << 20) for _ in range(N_PAGES * cache_config().page_size))


def _case(seed: int, plan: pd.Plan | None = None, d: int | None = None, h: int | None = None,
          slots: int | None = None, faults: tuple[str, ...] = ()) -> Case:
    rng = random.Random(seed * 7 + 3)
    return Case(plan or pd.Plan.random(seed, N_PAGES), _tokens(seed),
                rng.randint(0, 2) if d is None else d, rng.randint(0, 2) if h is None else h,
                rng.choice([3, 6, 8]) if slots is None else slots, faults)


def _run_gloo(cases, tmp_path):
    res = launch(pd_rank, 2, {"cases": cases, "store_dir": str(tmp_path)}, timeout_s=120)
    return [(case, res[0][k], res[1][k]) for k, case in enumerate(cases)]


def _monitor(case, p, d, tmp_path, actions=True):
    """The strict generated monitor over the merged log of one handoff."""
    return check_handoff(p["log"]["init"], log_events(p["log"]), d["log"]["init"], log_events(d["log"]),
                         n_pages=N_PAGES, decode_slots=case.decode_slots, actions=actions,
                         cfg=VerifyConfig(mode="strict", violation_dir=str(tmp_path / "violations")))


def _wrong_reads(case, reads) -> list[int]:
    nb = cache_config_page_nbytes()
    ps = cache_config().page_size
    return [i for i, b in sorted(reads.items())
            if torch.frombuffer(bytearray(b), dtype=torch.uint8).ne(stamp(list(case.tokens), i, nb, ps)).any()]


def _check_clean(case, p, d, tmp_path) -> None:
    assert (p["leaks"], d["leaks"]) == CLEAN_LEAKS, case
    assert _wrong_reads(case, d["reads"]) == [], case
    mon = _monitor(case, p, d, tmp_path)
    n_events = len(p["log"]["events"]) + len(d["log"]["events"])
    assert mon.checked == mon.steps == n_events > 0
    # both sides agree on whether it finished; an abort names who started it (crossing
    # aborts: each side may name itself)
    assert (p["outcome"] == "done") == (d["outcome"] == "done"), case
    if d["outcome"] == "done":
        assert sorted(d["reads"]) == list(range(N_PAGES))
    assert sorted(d["reads"]) == list(range(len(d["reads"])))    # decode reads in page order


def test_random_handoffs_over_gloo_leak_nothing_and_satisfy_the_monitor(tmp_path):
    cases = [_case(s) for s in range(32)]
    outcomes = set()
    for case, p, d in _run_gloo(cases, tmp_path):
        _check_clean(case, p, d, tmp_path)
        outcomes.add(d["outcome"])
    assert outcomes == {"done", "aborted_by_prefill", "aborted_by_decode"}


def _run_local(case: Case, store_dir: str) -> tuple[dict, dict]:
    """Both engines in this process (threads, an in-process channel): same endpoints."""
    src = CacheSource(case, store_dir)
    pool = DecodePool(case.decode_slots, cache_config_page_nbytes())
    a, b = pd.local_pair()
    pe, de = pd.PrefillEndpoint(a, src, case.plan), pd.DecodeEndpoint(b, pool, case.plan)
    got: dict = {}
    t = threading.Thread(target=lambda: got.setdefault("d", de.run()))
    t.start()
    outcome = pe.run()
    t.join(60)
    assert not t.is_alive()
    reads = {i: x.numpy().tobytes() for i, x in de.reads.items()}
    if got["d"] == "done":
        de.finish_request()
    as_log = lambda log: {"init": log.init, "events": [(e.clock, e.side, e.action, e.page, e.info)  # noqa: E731
                                                        for e in log.events]}
    return ({"outcome": outcome, "log": as_log(pe.log), "leaks": src.leaks()},
            {"outcome": got["d"], "log": as_log(de.log), "leaks": pool.leaks(), "reads": reads})


def test_many_seeds_in_process_raise_nothing(tmp_path):
    outcomes = set()
    for seed in range(100, 196):
        plan = pd.Plan.random(seed, N_PAGES)
        case = _case(seed, pd.Plan(seed, plan.prefill_abort_at, plan.decode_abort_at, plan.window, 0.0005))
        p, d = _run_local(case, str(tmp_path / f"s{seed}"))
        _check_clean(case, p, d, tmp_path)
        outcomes.add((p["outcome"], d["outcome"]))
    # crossing aborts happen: each side names itself
    assert ("aborted_by_prefill", "aborted_by_decode") in outcomes
    assert {"done", "aborted_by_prefill", "aborted_by_decode"} <= {o for pair in outcomes for o in pair}


#: fault -> its case, the step that commits it (action, spec page), the property named with
#: action checks on (the action's conjunct) and with invariants only
FAULT_CASES = {
    # page 2 (a host page) is asked for first thing after page 1 and goes out unloaded
    "send_before_load_back": (dict(seed=100, plan=pd.Plan(seed=100, window=1), d=1, h=2, slots=8),
                              ("PrefillSend", 2), "BugSendBeforeLoadBack \\/ ploc[i] = \"device\"",
                              "SendAfterLoadBack"),
    # decode asks for 3 pages, reads one, aborts: pages 2 and 3 may be in flight
    "abort_frees_in_flight": (dict(seed=101, plan=pd.Plan(seed=101, decode_abort_at=1, window=3), d=2, h=1, slots=8),
                              ("DecodeAbort", None), None, "InFlightDestOwned"),
    # same, and the pages kept for the in-flight copies are never freed
    "decode_leaks_on_abort": (dict(seed=101, plan=pd.Plan(seed=101, decode_abort_at=1, window=3), d=2, h=1, slots=8),
                              ("DecodeReceive", 2), None, "NoLeakOnAbort"),
    # prefill serves two pages, aborts, and never unlocks its prefix
    "prefill_leaks_on_abort": (dict(seed=102, plan=pd.Plan(seed=102, prefill_abort_at=2, window=2), d=2, h=1, slots=8),
                               ("PrefillRelease", None), "plock' = FALSE", "NoLeakOnAbort"),
}


def _first(events, action, page) -> int:
    """1-based position of the first event of (action, page) in the merged log."""
    for k, e in enumerate(events, 1):
        if e.action == action and (page is None or e.page == page):
            return k
    raise AssertionError(f"no {action}({page}) in the log")


def test_faults_are_named_by_the_generated_monitor_at_the_faulty_step(tmp_path):
    names = list(FAULT_CASES)
    cases = [_case(faults=(f,), **FAULT_CASES[f][0]) for f in names]
    for f, (case, p, d) in zip(names, _run_gloo(cases, tmp_path)):
        _, (action, page), conjunct, prop = FAULT_CASES[f]
        events = pd.merge(log_events(p["log"]), log_events(d["log"]))
        at = _first(events, action, page)
        for actions in (True, False):
            with pytest.raises(ProtocolViolation) as info:
                _monitor(case, p, d, tmp_path, actions=actions)
            err = info.value
            assert (err.action, err.step, err.arguments["page"]) == (action, at, page), (f, actions)
            if actions:
                assert (err.kind, err.property) == ("action", action), f
                if conjunct is not None:
                    assert err.conjunct == conjunct, f
            else:
                assert (err.kind, err.property) == ("invariant", prop), f
            assert err.location.startswith("spec/PDHandoff.tla:")
            assert err.trace_path is not None
        # what the fault did to the runtime
        if f == "send_before_load_back":
            assert _wrong_reads(case, d["reads"]) == [1]       # decode read the unloaded page's bytes
        elif f == "abort_frees_in_flight":
            landed_unowned = [e.page for e in events if e.action == "DecodeReceive" and not e.info["owned"]]
            assert landed_unowned == [2, 3] and d["leaks"] == CLEAN_LEAKS[1]
        elif f == "decode_leaks_on_abort":
            assert d["leaks"]["pages"] == 2 and p["leaks"] == CLEAN_LEAKS[0]
        else:
            assert p["leaks"]["locks"] > 0 and d["leaks"] == CLEAN_LEAKS[1]


def test_fifo_violation_is_named_by_the_action_guard(tmp_path):
    """A runtime that consumed a message other than the head of its channel (here: decode's
    log says it received page 2's copy while page 1's was sent first) fails at that step."""
    case = _case(5, pd.Plan(seed=5, window=2), d=N_PAGES, h=0, slots=8)
    p, d = _run_local(case, str(tmp_path / "s"))
    rows = d["log"]["events"]
    k = next(i for i, r in enumerate(rows) if r[2] == "DecodeReceive")
    clock, side, action, page, info = rows[k]
    rows[k] = (clock, side, action, page + 1, info)
    with pytest.raises(ProtocolViolation) as info_:
        _monitor(case, p, d, tmp_path)
    assert (info_.value.action, info_.value.property) == ("DecodeReceive", "DecodeReceive")
    assert info_.value.conjunct == 'AtHead(p2d, Msg("DATA", i))'


def test_faults_off_by_default():
    f = pd.Faults
    assert not (f.send_before_load_back or f.abort_frees_in_flight or f.decode_leaks_on_abort
                or f.prefill_leaks_on_abort)


@pytest.mark.parametrize("kwargs, msg", [
    ({"window": 0}, "window: must be an integer >= 1, got 0"),
    ({"window": -1}, "window: must be an integer >= 1, got -1"),
    ({"max_delay_s": -1.0}, "max_delay_s: must be a finite number >= 0, got -1.0"),
    ({"max_delay_s": float("nan")}, "max_delay_s: must be a finite number >= 0, got nan"),
    ({"decode_abort_at": -2}, "decode_abort_at: must be an integer >= 0, got -2"),
    ({"seed": 1.5}, "seed: must be an integer, got 1.5"),
])
def test_a_plan_that_cannot_run_is_refused(kwargs, msg):
    """window 0 made decode allocate nothing and both sides wait for each other forever; a
    negative delay failed one side (sleep's own error) and left the other waiting."""
    with pytest.raises(ValueError) as info:
        pd.Plan(**kwargs)
    assert str(info.value) == msg


def test_an_endpoint_whose_peer_failed_is_not_left_waiting(tmp_path):
    """The decode side raises mid-handoff (its pool's write fails): prefill's next receive
    gives up after the channel's bound with a named error instead of blocking forever."""
    case = _case(7, pd.Plan(seed=7, window=2), d=1, h=1, slots=8)
    src = CacheSource(case, str(tmp_path))
    pool = DecodePool(case.decode_slots, cache_config_page_nbytes())

    def broken_write(*args, **kwargs):
        raise OSError("decode pool: write failed")
    pool.write = broken_write
    a, b = pd.local_pair(timeout_s=1.0)
    pe, de = pd.PrefillEndpoint(a, src, case.plan), pd.DecodeEndpoint(b, pool, case.plan)
    failed: list = []

    def decode():
        try:
            de.run()
        except OSError as exc:
            failed.append(exc)
    t = threading.Thread(target=decode)
    t.start()
    with pytest.raises(pd.ChannelTimeout, match="no message from the peer for 1 s"):
        pe.run()
    t.join(10)
    assert not t.is_alive() and failed
    with pytest.raises(ValueError, match="timeout_s"):
        pd.local_pair(timeout_s=0)


@pytest.mark.parametrize("kwargs, msg", [
    (dict(d=5, h=5), "device_pages + host_pages: 5 + 5 exceeds the prefix's 6 pages"),
    (dict(d=-1, h=0), "device_pages: must be an integer >= 0, got -1"),
    (dict(d=0, h=0, faults=("no_such",)), "faults: no fault switch 'no_such'"),
])
def test_a_case_that_does_not_fit_its_prefix_is_named(tmp_path, kwargs, msg):
    """The split used to fail deep in the setup: `pages: expected 1 new pages, got 5`."""
    faults = kwargs.pop("faults", ())
    with pytest.raises(ValueError) as info:
        CacheSource(_case(3, slots=8, faults=faults, **kwargs), str(tmp_path))
    assert str(info.value).startswith(msg), str(info.value)
