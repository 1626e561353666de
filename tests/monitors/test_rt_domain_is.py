"""rt.domain_is: DOMAIN f = dom, True only where that is certain (the fused fast path over a
state mapped from scratch takes the domains of its element-wise conjuncts as given)."""
from __future__ import annotations

from hicache.monitors.rt import domain_is
from hicache.tla.values import Fcn, Interval


def test_sequences_have_the_domain_one_to_n():
    assert domain_is((7, 8, 9), Interval(1, 3))
    assert not domain_is((7, 8, 9), Interval(0, 2))
    assert not domain_is((7, 8, 9), Interval(1, 4))
    assert domain_is((7, 8), frozenset({1, 2}))
    assert not domain_is((7, 8), frozenset({1, 3}))
    assert domain_is((), Interval(1, 0))
    assert not domain_is((), Interval(0, 0))


def test_functions_have_exactly_their_keys():
    f = Fcn({0: "a", 1: "b", 2: "c"})
    assert domain_is(f, Interval(0, 2))
    assert not domain_is(f, Interval(0, 1))          # a key more
    assert not domain_is(f, Interval(0, 3))          # a key fewer
    assert not domain_is(Fcn({0: "a", 2: "c", 5: "d"}), Interval(0, 2))   # as many keys, other ones
    assert domain_is(Fcn({"x": 1, "y": 2}), frozenset({"x", "y"}))
    assert not domain_is(Fcn({"x": 1, "y": 2}), frozenset({"x", "z"}))


def test_a_boolean_on_either_side_is_not_known():
    # Python's TRUE == 1: {TRUE, 0} would equal the keys {0, 1}; the answer is "not known"
    assert not domain_is(Fcn({0: "a", True: "b"}), Interval(0, 1))
    assert not domain_is(Fcn({0: "a", 1: "b"}), frozenset({0, True}))
    assert not domain_is((5,), frozenset({True}))


def test_anything_else_is_not_known():
    assert not domain_is(None, Interval(0, 1))        # (a variable the state lacks)
    assert not domain_is(frozenset({0, 1}), Interval(0, 1))
    assert not domain_is(3, Interval(0, 1))
    assert not domain_is(Fcn({0: 1}), "Nodes")


def test_a_function_built_on_0_to_n_is_decided_by_its_length_and_answers_as_any_other():
    """HostTier's map builds its per-page functions as dict(enumerate(values)) and says so
    (KK_DENSE0): the domain test then compares the interval's bounds with the length alone,
    and answers what the key-by-key test answers; key_kinds never infers the flag."""
    from hicache.monitors.maps.host_tier import _fn0
    from hicache.tla.values import KK_DENSE0, KK_INT, key_kinds
    for values in ([False], [0, 3, 1], list(range(40))):
        dense, plain = _fn0(values), Fcn(dict(enumerate(values)))
        assert dense.kk == KK_INT | KK_DENSE0 and not key_kinds(plain) & KK_DENSE0 and dense == plain
        n = len(values)
        for dom in (Interval(0, n - 1), Interval(0, n), Interval(0, n - 2), Interval(1, n), Interval(1, n - 1),
                    Interval(-1, n - 2), Interval(5, 2), frozenset(range(n))):
            assert domain_is(dense, dom) == domain_is(plain, dom), (values, dom)
        assert domain_is(dense, Interval(0, n - 1)) and not domain_is(dense, Interval(1, n))
