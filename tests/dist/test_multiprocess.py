"""Real processes on gloo: CP, PP and CP x PP with per-rank transfer delays and storage faults.

Each rank checks, after every cache check, that the world agrees on the tree/in-flight
digest (verify=strict), that every applied transfer had completed (its destination bytes
equal its source), that every gathered byte equals a KV version written for those tokens,
and that logits equal a full recompute. Any breach is a violation in the rank's report.
"""
import pytest

from hicache.dist.runner import run_distributed
from hicache.dist.worker import Faults
from hicache.monitors.runtime import VerifyConfig
from hicache.protocol.prefix_agreement import StopPolicy, TimeoutBudget

BASE = dict(requests=14, device_pages_per_rank=4, host_pages_per_rank=6, storage_fail_p=0.3,
            transfer_delay_s=0.01, storage_delay_s=0.005, timeout_s=20.0, verify="strict")


def _assert_agreed(reports, requests):
    assert [r["rank"] for r in reports] == list(range(len(reports)))
    for r in reports:
        assert r["violations"] == []
        assert r["requests"] == requests
        # strict: one world digest agreement per cache check, all passed
        assert r["agreement_checks"] == r["cache_checks"] > 0
        assert r["events"]["StageApply"] == r["cache_checks"]
    first = reports[0]
    for r in reports[1:]:
        assert r["final_digest"] == first["final_digest"]
        assert r["tally"] == first["tally"]            # every rank used the same cached prefixes
        assert r["applied"] == first["applied"]        # same transfers and acks applied, same order
        assert r["cache_checks"] == first["cache_checks"]
        # one ack per batch on every rank, failures and terminations included; each published
        for name in ("RankPostAck", "SyncPublish", "StageCacheCheck", "TransferIssue", "InsertReject"):
            assert r["events"].get(name, 0) == first["events"].get(name, 0), name
    assert first["events"].get("RankPostAck", 0) == first["events"].get("SyncPublish", 0)
    t = first["tally"]
    assert t["device_tokens"] + t["host_tokens"] + t["storage_tokens"] + t["computed_tokens"] == t["input_tokens"]


@pytest.mark.parametrize("cp,pp,seed", [(2, 1, 1), (1, 2, 2), (2, 2, 3)])
def test_shared_prefix_stream_agrees_under_faults(cp, pp, seed):
    reports = run_distributed(cp=cp, pp=pp, seed=seed, **BASE)
    _assert_agreed(reports, BASE["requests"])
    t = reports[0]["tally"]
    assert t["device_tokens"] + t["host_tokens"] + t["storage_tokens"] > 0   # shared prefixes were reused
    if cp > 1:
        assert all(r["events"]["GatherFinish"] > 0 for r in reports)


#: Pools roomy enough (96 device pages over the CP group) that nothing is evicted: every hit is
#: a device hit decided by the workload alone, so the cached prefixes, and so each request's
#: new-token count, are the same at every CP size and under any timing.
ROOMY_PAGES = 96


@pytest.fixture(scope="module")
def cp1_reports():
    """The workload of the test below served by one CP rank (no query split)."""
    return run_distributed(cp=1, pp=1, seed=0, **{**BASE, "device_pages_per_rank": ROOMY_PAGES,
                                                  "host_pages_per_rank": ROOMY_PAGES})


@pytest.mark.parametrize("cp, empty_shares", [(3, [0, 1, 3]), (4, [0, 1, 3, 4])])
def test_cp_ranks_past_a_requests_last_row_take_part_with_an_empty_share(cp, empty_shares, cp1_reports):
    """A request whose cached prefix leaves fewer new tokens than CP ranks gives the ranks past
    its last row no query row: they attend nothing and still enter every collective of the
    request (the attention all-gather is padded to rank 0's share). At cp >= 3 such a rank
    used to raise (torch.arange(cp_rank, m, cp)) and the run died in a PeerFailure cascade."""
    pages = ROOMY_PAGES // cp
    reports = run_distributed(cp=cp, pp=1, seed=0, launch_timeout_s=60.0,
                              **{**BASE, "device_pages_per_rank": pages, "host_pages_per_rank": pages})
    _assert_agreed(reports, BASE["requests"])
    # this workload leaves 1 new token in one request, 2 in two, 3 in one: rank r has no row
    # of the requests with at most r new tokens
    assert [r["empty_shares"] for r in reports] == empty_shares
    # as cp=1 does: strict, every rank (each is the last stage) compared every request's
    # logits with a full recompute (no violation), and the same prefixes were served from cache
    _assert_agreed(cp1_reports, BASE["requests"])
    assert cp1_reports[0]["empty_shares"] == 0
    assert reports[0]["tally"] == cp1_reports[0]["tally"]
    assert reports[0]["evicted_device"] == cp1_reports[0]["evicted_device"] == 0


@pytest.mark.parametrize("policy,budget", [
    (StopPolicy.BEST_EFFORT, TimeoutBudget()),
    (StopPolicy.TIMEOUT, TimeoutBudget(base_s=0.0, per_ki_token_s=0.0)),   # expires at once
    (StopPolicy.TIMEOUT, TimeoutBudget(base_s=60.0)),                        # never expires here
    (StopPolicy.WAIT_COMPLETE, TimeoutBudget())])
def test_stop_policies_decided_once_and_shared(policy, budget):
    reports = run_distributed(cp=2, pp=2, seed=4, policy=policy, budget=budget, **BASE)
    _assert_agreed(reports, BASE["requests"])
    decided = [r["events"].get("PolicyDecide", 0) for r in reports]
    assert len(set(decided)) == 1                      # the verdict reached every rank
    first = reports[0]
    assert first["prefetches"] > 0
    assert all(r["terminated_prefetches"] == decided[0] for r in reports)
    # stage 0 votes at the first cache check after issue; the verdict is exact per policy
    expired = policy is StopPolicy.BEST_EFFORT or (policy is StopPolicy.TIMEOUT and budget.base_s == 0)
    assert decided[0] == (first["prefetches"] if expired else 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_seeded_bugs_are_caught_by_the_checks(seed):
    """The verification is not vacuous: a stage-1 rank that applies transfers without waiting,
    and a rank that writes wrong page bytes, are both reported. The engine's own checks are
    under test here, so the spec monitors are off whatever the suite's verified mode: they
    would stop the run at the injected fault before the engine reports it."""
    no_wait = run_distributed(cp=2, pp=2, seed=seed, faults=Faults(no_wait_rank=3), monitors=VerifyConfig(),
                              **BASE)
    assert any("applied before it completed" in v for v in no_wait[3]["violations"]), no_wait[3]
    # Both stage-0 ranks damage their pages; with a roomy device pool the family revisits hit.
    roomy = {**BASE, "device_pages_per_rank": 8, "host_pages_per_rank": 12, "storage_fail_p": 0.0}
    corrupt = run_distributed(cp=2, pp=2, seed=seed, faults=Faults(corrupt_ranks=(0, 1)), monitors=VerifyConfig(),
                              **roomy)
    assert corrupt[0]["tally"]["device_tokens"] > 0
    for rank in (0, 1):
        assert any("gathered bytes" in v for v in corrupt[rank]["violations"]), corrupt[rank]
    for rank in (2, 3):
        assert any("logits differ" in v for v in corrupt[rank]["violations"]), corrupt[rank]


def test_stage0_needs_no_wait_because_its_count_is_ready_on_every_stage0_rank():
    # Stage 0 pops only transfers that the MIN over its own ranks counted as ready, so even a
    # stage-0 rank that skips the wait (with slow copies) never applies an unfinished transfer.
    reports = run_distributed(cp=2, pp=2, seed=0, faults=Faults(no_wait_rank=1), **BASE)
    _assert_agreed(reports, BASE["requests"])


@pytest.mark.parametrize("verify", ["off", "sample"])
def test_verify_levels_check_exactly_what_they_promise(verify):
    reports = run_distributed(cp=2, pp=1, seed=5, **{**BASE, "verify": verify})
    for r in reports:
        assert r["violations"] == [] and r["requests"] == BASE["requests"]
        # sample: a world digest check at every 4th cache check; off: none (pp_sync digests only)
        assert r["agreement_checks"] == (r["cache_checks"] // 4 if verify == "sample" else 0)
    assert len({r["final_digest"] for r in reports}) == 1
