"""Faults on real processes: a dead or stalled rank, a diverged rank, mismatched configuration.
Every case ends with a clear error naming the step and the rank, within the bounds."""
import pytest

from hicache.dist.launch import LaunchError
from hicache.dist.runner import run_distributed
from hicache.dist.worker import Faults

QUICK = dict(cp=2, pp=1, requests=8, timeout_s=3.0, storage_fail_p=0.0, transfer_delay_s=0.002)


def _failures(**kw) -> dict[int, str]:
    with pytest.raises(LaunchError) as info:
        run_distributed(launch_timeout_s=60, grace_s=4, **kw)
    return info.value.failures


def test_dead_rank_fails_peers_with_step_and_rank():
    fails = _failures(faults=Faults(die_rank=1, at_check=2), **QUICK)
    assert "exited with code 17" in fails[1]
    assert "PeerFailure: rank 0: step 'pp_sync#" in fails[0]


def test_stalled_rank_times_out_peers_instead_of_hanging():
    fails = _failures(faults=Faults(stall_rank=0, at_check=2), **QUICK)
    assert "PeerFailure: rank 1: step 'pp_sync#2'" in fails[1]     # checks are numbered from 0
    assert "killed" in fails[0] or "exited" in fails[0]


def test_diverged_stage0_rank_is_detected_at_the_step_where_it_happens():
    fails = _failures(faults=Faults(diverge_rank=1, at_check=2), cp=2, pp=2, requests=8, timeout_s=5.0)
    # Stage 0 sees it in its MIN-reduced [digest, -digest] pair at this very check and
    # forwards the failed pair, so stage 1 reports the same step.
    for rank in (0, 1):
        assert f"DivergenceError: rank {rank}: step 'pp_sync#2': ranks disagree on the state digest" in fails[rank]
    for rank in (2, 3):
        assert (f"DivergenceError: rank {rank}: step 'pp_sync#2': an upstream stage found its ranks "
                "disagreeing on the state digest") in fails[rank]


def test_diverged_later_stage_rank_is_detected_against_upstream():
    fails = _failures(faults=Faults(diverge_rank=3, at_check=2), cp=2, pp=2, requests=8, timeout_s=5.0)
    assert "DivergenceError: rank 3: step 'pp_sync#2': state digest differs from upstream rank 1" in fails[3]
    assert set(fails) == {0, 1, 2, 3}      # the others fail too (their peer is gone), none hangs


@pytest.mark.parametrize("field,value", [("page_size", 8), ("layout", "page_first"), ("host_pages_per_rank", 3),
                                         ("cp", 1), ("verify", "off")])
def test_mismatched_configuration_is_rejected_at_start(field, value):
    fails = _failures(faults=Faults(overrides={1: {field: value}}), **QUICK)
    for rank in (0, 1):
        assert f"configuration mismatch in field '{field}'" in fails[rank]
        assert "config_agreement#0" in fails[rank]


@pytest.mark.parametrize("field, value, msg", [
    ("transfer_delay_s", -1.0, "transfer_delay_s: must be a finite number >= 0, got -1.0"),
    ("transfer_delay_s", float("nan"), "transfer_delay_s: must be a finite number >= 0, got nan"),
    ("transfer_delay_s", float("inf"), "transfer_delay_s: must be a finite number >= 0, got inf"),
    ("storage_delay_s", -0.5, "storage_delay_s: must be a number in [0, 5], got -0.5"),
    ("storage_delay_s", 100.0, "storage_delay_s: must be a number in [0, 5], got 100.0"),
    ("storage_fail_p", 2.0, "storage_fail_p: must be a number in [0, 1], got 2.0"),
    ("timeout_s", float("nan"), "timeout_s: must be a finite number > 0, got nan"),
    ("timeout_s", float("inf"), "timeout_s: must be a finite number > 0, got inf"),
    ("cp", 2.0, "cp: must be an integer >= 1, got 2.0"),
    ("cp", True, "cp: must be an integer >= 1, got True"),
    ("requests", -1, "requests: must be an integer >= 0, got -1"),
    ("policy", "bogus", "policy: 'bogus' is not one of best_effort, wait_complete, timeout"),
    ("layout", "bogus", "layout: 'bogus' is not one of layer_first, page_first, page_first_direct"),
])
def test_a_bad_setting_is_refused_before_any_rank_starts(tmp_path, field, value, msg):
    """A negative or NaN injected delay used to start the ranks and fail one of them on a
    copy thread (time.sleep's own ValueError, as a DistStepError), a bad policy failed
    mid-run with a KeyError, a NaN timeout as a traceback on every rank: the config refuses
    each, naming the field."""
    from hicache.dist.config import RunConfig
    with pytest.raises(ValueError) as info:
        RunConfig(storage_dir=str(tmp_path), **{field: value})
    assert str(info.value) == msg


#: a workload whose requests prefetch from storage (shared prefixes evicted past small pools)
PREFETCHING = dict(QUICK, requests=14, device_pages_per_rank=4, host_pages_per_rank=6, storage_delay_s=0.0,
                   verify="off", seed=1)


def test_a_failed_prefetch_thread_stops_every_rank_at_the_same_check_naming_it():
    """A listener raising on rank 1's loader thread used to leave its error unread (pop only
    looked while waiting, and the agreed count, a MIN, never made it wait): the request
    never completed and every rank spun in cache checks for ever, each successful pp_sync
    counting as progress for the launcher."""
    fails = _failures(faults=Faults(loader_fault_ranks=(1,), serve_limit_s=40.0), **PREFETCHING)
    assert ("the storage prefetch thread prefetch-load-r1 failed: RuntimeError: injected: a listener failed "
            "on rank 1's loader thread") in fails[1]
    assert fails[1].startswith("PrefetchFailure: rank 1: step 'cache_check#")
    step = fails[1].split("'")[1]
    # rank 0 stops at the very same check, from the flag in the pp_sync vector
    assert fails[0].startswith(f"PrefetchFailure: rank 0: step '{step}': the storage prefetch of rank 1 failed")


def test_a_serve_loop_where_nothing_moves_stops_every_rank_naming_what_it_waits_for():
    """Both ranks' loaders hang (a stuck listener): no thread fails, no collective times out;
    nothing moves, and the loop's bound (timeout_s without any change) stops both ranks."""
    fails = _failures(faults=Faults(loader_fault_ranks=(0, 1), loader_fault="hang", stall_s=60.0,
                                    serve_limit_s=40.0), **PREFETCHING)
    steps = set()
    for rank in (0, 1):
        first = fails[rank].splitlines()[0]
        assert first.startswith(f"LocalTimeout: rank {rank}: step 'cache_check#"), first
        assert "nothing moved for 3 s" in first and "waiting for the storage prefetch of request" in first
        assert "this rank's prefetch loader has been on batch 0 of request" in first
        steps.add(first.split("'")[1])
    assert len(steps) == 1


@pytest.mark.parametrize("faults, slow", [
    (Faults(hung_storage_rank=1, stall_s=60.0), {}),          # every call of rank 1 hangs
    (Faults(), {"storage_delay_s": 5.0, "storage_fail_p": 0.0}),    # healthy, slower than the collectives
], ids=["hung", "slow"])
def test_a_slow_or_hung_storage_is_a_counted_miss_not_a_dead_peer(faults, slow):
    """Storage calls ran between collectives (exists, write-through) or gated every rank's
    prefetch sync (reads) under the collective timeout: a slow backend stopped the run as a
    PeerFailure. Each call has its own, shorter bound now; one past it is a miss."""
    cfg = dict(PREFETCHING, timeout_s=2.0, **slow)
    reports = run_distributed(launch_timeout_s=60, grace_s=4, faults=faults, **cfg)
    for r in reports:
        assert r["requests"] == cfg["requests"] and r["violations"] == []
    assert len({r["final_digest"] for r in reports}) == 1
    timeouts = [r["storage_timeouts"] for r in reports]
    if faults.hung_storage_rank is not None:
        assert timeouts[1] > 0 and timeouts[0] == 0
    else:
        assert sum(timeouts) > 0


#: the prefetching workload on two PP stages (ranks 0, 1: stage 0; ranks 2, 3: stage 1)
PP2 = dict(PREFETCHING, pp=2)


def _first_lines(fails: dict[int, str]) -> dict[int, str]:
    return {r: m.splitlines()[0] for r, m in fails.items()}


def test_a_later_stage_prefetch_failure_stops_every_rank_at_the_same_check_naming_it():
    """Rank 3 (stage 1) loses its prefetch loader. Its fault slot used to stay on stage 1
    (the pp_sync vector only goes down): ranks 0-2 ended in a PeerFailure on a closed
    connection, at different steps, none naming rank 3 or what failed. Now every rank stops
    at the check where rank 3 reports it."""
    fails = _first_lines(_failures(faults=Faults(loader_fault_ranks=(3,), serve_limit_s=40.0), **PP2))
    assert fails[3].startswith("PrefetchFailure: rank 3: step 'cache_check#"), fails[3]
    assert "the storage prefetch thread prefetch-load-r3 failed: RuntimeError: injected" in fails[3]
    step = fails[3].split("'")[1]
    for rank in (0, 1, 2):
        assert fails[rank].startswith(f"PrefetchFailure: rank {rank}: step '{step}': the storage prefetch "
                                      "of rank 3 failed"), fails[rank]


@pytest.mark.parametrize("origin, pp, kind, own, shared", [
    (2, 2, "violation", "AssertionError: injected: a monitor's check failed on rank 2's copy thread",
     "a monitor's check failed (a protocol violation) on a copy thread of rank 2"),
    (3, 2, "raise", "DistStepError: rank 3: step 'cache_check#",
     "a transfer of rank 3 failed on its copy thread"),
    (1, 1, "raise", "DistStepError: rank 1: step 'cache_check#",
     "a transfer of rank 1 failed on its copy thread"),
], ids=["stage1-violation", "stage1-error", "stage0-error"])
def test_a_copy_thread_failure_stops_every_rank_at_the_same_check_naming_it(origin, pp, kind, own, shared):
    """A listener raising on a copy thread (a monitor's violation, or any error): its rank
    raised it at its next cache check *before* the pp_sync, so every other rank saw only a
    PeerFailure (a closed connection), on stage 0 as on stage 1. Now it rides in the fault
    slot of that check: the others stop at the same check, naming the rank and what failed."""
    fails = _first_lines(_failures(faults=Faults(copy_fault_ranks=(origin,), copy_fault=kind, serve_limit_s=40.0),
                                   **dict(QUICK, pp=pp)))
    assert fails[origin].startswith(own), fails[origin]
    steps = set()
    for rank in set(fails) - {origin}:
        assert fails[rank].startswith(f"PeerFault: rank {rank}: step 'cache_check#"), fails[rank]
        assert shared in fails[rank], fails[rank]
        steps.add(fails[rank].split("'")[1])
    assert len(fails) == 2 * pp and len(steps) == 1
    if kind == "raise":
        assert fails[origin].split("'")[1] in steps
