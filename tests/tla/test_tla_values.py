"""Function-set membership (`f \\in [S -> T]`): FcnSet.contains tests a whole range in one
C-level pass (frozenset.issuperset, or type/min/max over an interval); its verdict must be
the element-by-element definition's on every kind of value, including the ones Python's
equality conflates (TRUE == 1: an evaluation error in both, as TLC's "Attempted to compare")
and the ones an interval refuses (a bool, a non-int)."""
from __future__ import annotations

import random

from hicache.tla.errors import EvalError
from hicache.tla.values import Fcn, FcnSet, Interval, ModelValue, in_set


def reference(dom, rng, v) -> bool:
    """[dom -> rng] membership by the definition: a function on exactly dom, each value in rng."""
    d = frozenset(dom)
    if type(v) is tuple:
        keys, vals = frozenset(range(1, len(v) + 1)), list(v)
    elif type(v) is Fcn:
        keys, vals = frozenset(v.d), list(v.d.values())
    else:
        return False
    return keys == d and all(in_set(x, rng) for x in vals)


VALUES = [0, 1, 2, 3, 5, -1, True, False, "a", ModelValue("m"), (1,), 2.0]
RANGES = [Interval(0, 2), Interval(1, 3), Interval(3, 2), frozenset({0, 1}), frozenset({True, False}),
          frozenset({"a", 1}), FcnSet(frozenset({1}), frozenset({0}))]


def test_function_set_membership_matches_the_definition():
    rnd = random.Random(7)
    checked = {True: 0, False: 0, "error": 0}
    for _ in range(3000):
        rng = rnd.choice(RANGES)
        n = rnd.randint(0, 3)
        dom = Interval(1, n) if rnd.random() < 0.5 else frozenset(range(1, n + 1))
        size = n if rnd.random() < 0.8 else rnd.randint(0, 4)
        vals = [rnd.choice(VALUES) for _ in range(size)]
        v = tuple(vals) if rnd.random() < 0.5 else Fcn(dict(zip(range(1, size + 1), vals)))
        want, got = _verdict(reference, dom, rng, v), _verdict(FcnSet(dom, rng).contains, v)
        assert got == want and type(got) is type(want), (dom, rng, v, got, want)
        checked[want] += 1
    # every verdict was exercised, often
    assert checked[True] > 300 and checked[False] > 300 and checked["error"] > 30


def _verdict(f, *args):
    try:
        return f(*args)
    except EvalError:
        return "error"


def test_interval_range_refuses_bools_and_non_ints():
    s = FcnSet(Interval(1, 2), Interval(0, 5))
    assert s.contains((0, 5))
    assert not s.contains((True, 1))       # TRUE is not an integer, though TRUE == 1
    assert not s.contains((1, 2.0))
    assert not s.contains((1, 6)) and not s.contains((-1, 1))
    assert FcnSet(frozenset(), Interval(0, 1)).contains(())


def test_the_range_operator_refuses_what_is_not_an_integer():
    """a..b builds a..b from two integers only (a boolean is not one, though TRUE == 1), and
    says which operands it was given."""
    import pytest

    from hicache.tla.stdlib import BUILTINS
    rng = BUILTINS[".."].impl
    assert (rng(0, 2).lo, rng(0, 2).hi) == (0, 2)
    for a, b in ((True, 2), (0, "x"), (0, 1.5), (None, 3)):
        with pytest.raises(EvalError, match=r"\.\. applied to .* both must be integers"):
            rng(a, b)
