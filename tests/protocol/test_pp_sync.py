import pytest

from hicache.protocol.digest import digest_of, pair, pair_agrees, step_code
from hicache.protocol.pp_sync import COUNT_PLACEHOLDER, SyncLayout, leading_ready, min_reduce, pop_plan
from hicache.protocol.explore import explore
from hicache.protocol.pp_sync_model import PPModel, Variant


def test_leading_ready_stops_at_first_not_ready():
    assert leading_ready([]) == 0
    assert leading_ready([True, True, False, True]) == 2
    assert leading_ready([False, True]) == 0


def test_sync_vector_agreement_and_divergence():
    lay = SyncLayout(n_counts=2, n_votes=1)
    a = lay.encode(step=7, digest=11, counts=[3, 1], votes=[0])
    b = lay.encode(step=7, digest=11, counts=[2, 5], votes=[1])
    out = lay.decode(min_reduce([a, b]))
    assert out.step_agreed and out.digest_agreed
    assert out.counts == (2, 1) and out.votes == (1,)
    c = lay.encode(step=7, digest=12, counts=[COUNT_PLACEHOLDER, COUNT_PLACEHOLDER], votes=[0])
    out = lay.decode(min_reduce([a, c]))
    assert out.step_agreed and not out.digest_agreed
    assert out.counts == (3, 1)                  # placeholders never lower the MIN
    d = lay.encode(step=8, digest=11, counts=[3, 1], votes=[0])
    assert not lay.decode(min_reduce([a, d])).step_agreed


def test_sync_vector_validates_shape():
    lay = SyncLayout(n_counts=1, n_votes=0)
    with pytest.raises(ValueError, match="counts"):
        lay.encode(1, 1, [1, 2], [])
    with pytest.raises(ValueError, match="reduced vector"):
        lay.decode([0] * 7)


def test_digest_pairs():
    x, y = digest_of([1, "a", (2, 3)]), digest_of([1, "a", (2, 4)])
    assert x != y and 0 <= x < 2 ** 62
    assert pair_agrees(min(x, x), min(-x, -x))
    assert not pair_agrees(min(x, y), min(-x, -y))
    assert step_code("check", 1) != step_code("check", 2)
    assert pair(5) == (5, -5)


def test_pop_plan_is_exact():
    assert pop_plan(2, 5) == 2
    with pytest.raises(RuntimeError, match="issued"):
        pop_plan(3, 2)


@pytest.mark.parametrize("stages,ranks,transfers,rounds", [(2, 2, 2, 2), (3, 1, 2, 2), (2, 1, 3, 3)])
def test_pp_sync_exhaustive_correct(stages, ranks, transfers, rounds):
    states, bad = explore(PPModel(stages, ranks, transfers, rounds))
    assert bad == []
    assert states > 100


@pytest.mark.parametrize("variant,prop", [(Variant.LOCAL_COUNT, "SameOrder"), (Variant.NO_WAIT, "NoEarlyApply")])
def test_pp_sync_seeded_bugs_are_caught(variant, prop):
    _, bad = explore(PPModel(2, 2, 2, 2, variant))
    assert bad and all(b.startswith(prop) for b in bad)
