import itertools

import pytest

from hicache.protocol.prefix_agreement import (StopInput, StopPolicy, TimeoutBudget, agree_ack, agreed_prefix,
                                               batch_plan, decide_terminate, rank_acks)
from hicache.protocol.explore import explore
from hicache.protocol.prefix_agreement_model import PAModel, Variant


def test_batch_plan():
    assert batch_plan(5, 2) == (2, 2, 1)
    assert batch_plan(4, 2) == (2, 2)
    assert batch_plan(0, 3) == ()
    with pytest.raises(ValueError, match="batch_pages"):
        batch_plan(3, 0)


def test_rank_acks_one_per_batch_failures_and_termination_included():
    plan = (2, 2, 2)
    assert rank_acks(plan, [2, 2, 2]) == [2, 2, 2]
    assert rank_acks(plan, [2, 1, 2]) == [2, 1, 0]     # nothing after a hole counts
    assert rank_acks(plan, [2, None, None]) == [2, 0, 0]  # terminated: still one ack per batch
    with pytest.raises(ValueError):
        rank_acks(plan, [3, 0, 0])


def _outcomes(size):
    return [None, *range(size + 1)]


@pytest.mark.parametrize("plan", [(1, 1, 1), (2, 1), (2, 2, 1)])
def test_published_prefix_is_min_of_rank_prefixes_exhaustive(plan):
    per_rank = [rank_acks(plan, list(o)) for o in itertools.product(*(_outcomes(s) for s in plan))]
    for a, b in itertools.product(per_rank, repeat=2):
        published = [agree_ack(x) for x in zip(a, b)]
        full = agreed_prefix(plan, published)
        assert full == min(agreed_prefix(plan, a), agreed_prefix(plan, b))
        # consuming fewer acks never gives a longer prefix; prefix grows monotonically
        partial = [agreed_prefix(plan, published[:k]) for k in range(len(plan) + 1)]
        assert partial == sorted(partial) and partial[-1] == full


def test_timeout_budget_formula():
    b = TimeoutBudget(base_s=1.0, per_ki_token_s=2.0)
    assert b.seconds(pages=8, page_size=256) == pytest.approx(1.0 + 8 * 0.25 * 2.0)
    with pytest.raises(ValueError, match="base_s"):
        TimeoutBudget(base_s=-1)


@pytest.mark.parametrize("policy,elapsed,expect", [
    (StopPolicy.BEST_EFFORT, 0.0, True), (StopPolicy.WAIT_COMPLETE, 1e9, False),
    (StopPolicy.TIMEOUT, 0.99, False), (StopPolicy.TIMEOUT, 1.0, True)])
def test_stop_policies(policy, elapsed, expect):
    inp = StopInput(elapsed_s=elapsed, pages=4, page_size=256, budget=TimeoutBudget(base_s=0.5, per_ki_token_s=0.5))
    assert decide_terminate(policy, inp) is expect


@pytest.mark.parametrize("ranks,leaders,plan,checks", [(2, 1, (1, 1), 2), (2, 1, (2, 2), 3), (3, 2, (1,), 2)])
def test_prefix_agreement_exhaustive_same_prefix_everywhere(ranks, leaders, plan, checks):
    states, bad = explore(PAModel(ranks, leaders, plan, checks))
    assert bad == [] and states > 100


def test_prefix_agreement_seeded_bug_local_queue_is_caught():
    # A rank that uses its locally published acks (later progress it can already see)
    # ends up with another prefix than its peers.
    _, bad = explore(PAModel(2, 1, (1, 1), 2, Variant.LOCAL_QUEUE))
    assert bad and bad[0].startswith("SamePrefix")
