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


# --- bad input is refused by name (QA sweep: NaN made the timeout policy never fire, floats
# --- and bools came back as acks, a 0-page batch let the prefix run past it)
NAN, INF = float("nan"), float("inf")
BUDGET = TimeoutBudget(base_s=0.5, per_ki_token_s=0.5)


@pytest.mark.parametrize("kwargs,field", [
    (dict(elapsed_s=NAN), "elapsed_s"), (dict(elapsed_s=INF), "elapsed_s"), (dict(elapsed_s=-5.0), "elapsed_s"),
    (dict(elapsed_s=True), "elapsed_s"), (dict(pages=NAN), "pages"), (dict(pages=1.5), "pages"),
    (dict(pages=-1), "pages"), (dict(page_size=0), "page_size"), (dict(page_size=64.0), "page_size"),
    (dict(budget=None), "budget"),
])
def test_stop_input_is_validated_once_at_construction(kwargs, field):
    args = dict(elapsed_s=1e9, pages=4, page_size=256, budget=BUDGET) | kwargs
    with pytest.raises(ValueError, match=rf"^{field}: must be "):
        StopInput(**args)


@pytest.mark.parametrize("args,field", [((NAN, 64), "pages"), ((True, 64), "pages"), ((1.5, 64), "pages"),
                                        ((-1, 64), "pages"), ((2, 1.5), "page_size"), ((2, NAN), "page_size"),
                                        ((2, 0), "page_size"), ((2, True), "page_size")])
def test_timeout_budget_seconds_refuses_non_integers(args, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer"):
        TimeoutBudget().seconds(*args)


@pytest.mark.parametrize("args,field", [((5.0, 2), "total_pages"), ((True, 1), "total_pages"),
                                        ((NAN, 2), "total_pages"), ((INF, 2), "total_pages"),
                                        ((-1, 2), "total_pages"), ((5, 2.5), "batch_pages"),
                                        ((5, NAN), "batch_pages"), ((5, True), "batch_pages")])
def test_batch_plan_refuses_non_integers(args, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer"):
        batch_plan(*args)


@pytest.mark.parametrize("call,field", [
    (lambda: rank_acks((2, 2), [1.5, None]), r"loaded\[0\]"), (lambda: rank_acks((2, 2), [True, 2]), r"loaded\[0\]"),
    (lambda: rank_acks((2, 2), [2, NAN]), r"loaded\[1\]"), (lambda: rank_acks((2, 2), [3, 0]), r"loaded\[0\]"),
    (lambda: rank_acks((2, 0), [2, 0]), r"plan\[1\]"), (lambda: rank_acks((2, 1.0), [2, 1]), r"plan\[1\]"),
    (lambda: agree_ack([NAN, 1]), r"acks\[0\]"), (lambda: agree_ack([1, NAN]), r"acks\[1\]"),
    (lambda: agree_ack([1, 1.5]), r"acks\[1\]"), (lambda: agree_ack([-1, 1]), r"acks\[0\]"),
    (lambda: agreed_prefix((2, 2), [1.5]), r"published\[0\]"),
    (lambda: agreed_prefix((2, 2), [True]), r"published\[0\]"),
    (lambda: agreed_prefix((2, 2), [2, 3]), r"published\[1\]"),
    (lambda: agreed_prefix((2, 0, 2), [2, 0, 2]), r"plan\[1\]"),
    (lambda: agreed_prefix((-1,), [-1]), r"plan\[0\]"),
])
def test_acks_and_plans_refuse_bad_input_by_name(call, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer"):
        call()


def test_acks_take_numpy_integers():
    np = pytest.importorskip("numpy")
    plan = batch_plan(np.int64(5), np.int64(2))
    assert plan == (2, 2, 1) and all(type(b) is int for b in plan)
    assert rank_acks(plan, [np.int64(2), np.int64(1), None]) == [2, 1, 0]
    got = agree_ack([np.int64(2), np.int64(1)])
    assert got == 1 and type(got) is int
    assert agreed_prefix(plan, [np.int64(2), np.int64(2), np.int64(1)]) == 5
    assert TimeoutBudget(base_s=1.0, per_ki_token_s=2.0).seconds(np.int64(8), np.int64(256)) == pytest.approx(5.0)
    assert decide_terminate(StopPolicy.TIMEOUT, StopInput(elapsed_s=1e9, pages=np.int64(4), page_size=256,
                                                          budget=BUDGET))
