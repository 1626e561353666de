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


# --- bad input is refused by name (QA sweep: floats, NaN and bools went into the int64 vector)
NAN = float("nan")


@pytest.mark.parametrize("args,field", [((2.5, 0), "n_counts"), ((NAN, 0), "n_counts"), ((True, 0), "n_counts"),
                                        ((-1, 0), "n_counts"), ((0, 1.5), "n_votes")])
def test_sync_layout_refuses_non_integer_widths(args, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer >= 0, got "):
        SyncLayout(*args)


@pytest.mark.parametrize("kwargs,field", [
    (dict(counts=[NAN, 1]), r"counts\[0\]"), (dict(counts=[1, 1.5]), r"counts\[1\]"),
    (dict(counts=[True, 1]), r"counts\[0\]"), (dict(counts=[2 ** 70, 1]), r"counts\[0\]"),
    (dict(counts=[COUNT_PLACEHOLDER + 1, 1]), r"counts\[0\]"), (dict(counts=[-1, 1]), r"counts\[0\]"),
    (dict(step=2 ** 63), "step"), (dict(step=1.5), "step"), (dict(step=NAN), "step"),
    (dict(digest=-(2 ** 63)), "digest"), (dict(digest=True), "digest"),
    (dict(votes=[NAN]), r"votes\[0\]"), (dict(votes=[-5]), r"votes\[0\]"), (dict(votes=[0.5]), r"votes\[0\]"),
])
def test_encode_refuses_fields_that_do_not_fit_the_int64_vector(kwargs, field):
    lay = SyncLayout(n_counts=2, n_votes=1)
    args = dict(step=7, digest=11, counts=[1, 1], votes=[0]) | kwargs
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer"):
        lay.encode(**args)


def test_encode_takes_numpy_integers_and_int64_extremes():
    np = pytest.importorskip("numpy")
    lay = SyncLayout(n_counts=2, n_votes=1)
    vec = lay.encode(np.int64(7), 2 ** 63 - 1, [np.int64(3), COUNT_PLACEHOLDER], [np.int32(1)])
    assert vec == [7, -7, 2 ** 63 - 1, -(2 ** 63 - 1), 3, COUNT_PLACEHOLDER, -1]
    assert all(type(x) is int for x in vec)


def test_min_reduce_and_decode_refuse_non_integers():
    # min() over a NaN answers by position: without the check these two orders disagree
    for vectors, field in (([[NAN], [1]], r"vectors\[0\]\[0\]"), ([[1], [NAN]], r"vectors\[1\]\[0\]"),
                           ([[1], [1.5]], r"vectors\[1\]\[0\]")):
        with pytest.raises(ValueError, match=rf"^{field}: must be an integer"):
            min_reduce(vectors)
    with pytest.raises(ValueError, match=r"^vectors\[1\]: has 1 fields"):
        min_reduce([[1, 2], [1]])
    lay = SyncLayout(n_counts=1, n_votes=0)
    with pytest.raises(ValueError, match=r"^reduced\[4\]: must be an integer"):
        lay.decode([7, -7, 1, -1, 1.5])


@pytest.mark.parametrize("args,field", [((NAN, 3), "agreed"), ((1.5, 3), "agreed"), ((True, 3), "agreed"),
                                        ((-1, 3), "agreed"), ((2, 2.5), "queue_len"), ((0, -1), "queue_len"),
                                        ((3, NAN), "queue_len")])
def test_pop_plan_refuses_non_integers(args, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer >= 0, got "):
        pop_plan(*args)


def test_pop_plan_takes_numpy_integers():
    np = pytest.importorskip("numpy")
    got = pop_plan(np.int64(2), np.int64(5))
    assert got == 2 and type(got) is int
