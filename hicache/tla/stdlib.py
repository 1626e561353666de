"""Standard modules implemented natively: Naturals, Integers, Sequences, FiniteSets, TLC, Bags.

Each builtin is a `Builtin` record: its arity, which parameters are operators (passed as
Closure values), and an implementation over values. Type errors raise EvalError with a
message naming the operator, e.g. `1 + {}` -> "+ applied to 1 and {}".
"""
from __future__ import annotations

import itertools
import random
import sys
from dataclasses import dataclass, field
from typing import Callable

from hicache.tla.errors import EvalError
from hicache.tla.values import (
    CombinedSet, is_infinite, Fcn, InfiniteSet, Interval, PowerSet, ProductSet, RecFcn, as_frozenset, card,
    check_keys, cross_common, crossing_error, fmt, in_set, is_set, iter_values, mk_fcn, set_has, set_of, sorted_values,
)


@dataclass(frozen=True, slots=True)
class Builtin:
    name: str
    arity: int                       # -1: variadic
    impl: Callable
    op_params: frozenset = field(default_factory=frozenset)  # indices of operator parameters
    impure: bool = False             # side effects or state-dependence: never constant-folded


def _int2(name):
    def check(a, b):
        if type(a) is not int or type(b) is not int:
            raise EvalError(f"{name} applied to {fmt(a)} and {fmt(b)}; both must be integers")
    return check


def _plus(a, b):
    if type(a) is int and type(b) is int:
        return a + b
    raise EvalError(f"+ applied to {fmt(a)} and {fmt(b)}; both must be integers")


def _minus(a, b):
    if type(a) is int and type(b) is int:
        return a - b
    raise EvalError(f"- applied to {fmt(a)} and {fmt(b)}; both must be integers")


def _times(a, b):
    if type(a) is int and type(b) is int:
        return a * b
    raise EvalError(f"* applied to {fmt(a)} and {fmt(b)}; both must be integers")


def _pow(a, b):
    if type(a) is not int or type(b) is not int:
        _int2("^")(a, b)
    if b < 0:
        raise EvalError(f"^ with negative exponent {b}")
    return a ** b


def _div(a, b):
    if type(a) is int and type(b) is int and b > 0:
        return a // b          # (the common case first: a monitor's placement arithmetic)
    _int2("\\div")(a, b)
    if b == 0:
        raise EvalError("division by zero in \\div")
    return a // b


def _mod(a, b):
    if type(a) is int and type(b) is int and b > 0:
        return a % b           # (the common case first: Owner(p) = p % CP per page checked)
    _int2("%")(a, b)
    raise EvalError(f"% requires a positive divisor, got {b}")


def _cmp(name, op):
    def f(a, b):
        if type(a) is int and type(b) is int:
            return op(a, b)
        raise EvalError(f"{name} applied to {fmt(a)} and {fmt(b)}; both must be integers")
    return f


def _range(a, b):
    # (tested in place, not through _int2's checker, which is a closure built per call: a..b
    # is evaluated per element in the generated monitors and per state in the checker)
    if type(a) is int and type(b) is int:
        return Interval(a, b)
    raise EvalError(f".. applied to {fmt(a)} and {fmt(b)}; both must be integers")


def _neg(a):
    if type(a) is int:
        return -a
    raise EvalError(f"unary - applied to {fmt(a)}")


# ------------------------------------------------------------------ sets
def _common(a: frozenset, b: frozenset, op: str):
    """The elements two sets have in common are compared in TLA+: an error where Python's
    equality paired a boolean with an integer ({1} \\cup {TRUE})."""
    r = cross_common(a, b)
    if r is not None:
        raise EvalError(crossing_error(r, what=f"{fmt(a)} {op} {fmt(b)}"))


def _union(a, b):
    if is_infinite(a) or is_infinite(b):
        return CombinedSet("cup", a, b)
    fa, fb = as_frozenset(a), as_frozenset(b)
    u = fa | fb
    if len(u) != len(fa) + len(fb):
        _common(fa, fb, "\\cup")
    return u


def _inter(a, b):
    if is_infinite(a):
        if is_infinite(b):
            raise EvalError(f"cannot intersect two infinite sets {fmt(a)} and {fmt(b)}")
        a, b = b, a
    if is_infinite(b):
        return frozenset(x for x in iter_values(a) if in_set(x, b))
    fa, fb = as_frozenset(a), as_frozenset(b)
    i = fa & fb
    if i:
        _common(fa, fb, "\\cap")
    return i


def _minus_set(a, b):
    if not is_set(a) or not is_set(b):
        raise EvalError(f"\\ applied to {fmt(a)} and {fmt(b)}; both must be sets")
    if is_infinite(a):
        return CombinedSet("minus", a, b)
    fa = as_frozenset(a)
    if type(b) is frozenset:
        d = fa - b
        if len(d) != len(fa):
            _common(fa, b, "\\")
        return d
    return frozenset(x for x in fa if not in_set(x, b))


def _subseteq(a, b):
    if not is_set(a):
        raise EvalError(f"\\subseteq applied to non-set {fmt(a)}")
    if type(a) is frozenset:
        # the set-wide forms of `in_set` on every element (a monitor's TypeOK checks a free
        # list of a whole device against an interval at each step): a frozenset's membership
        # is its elements' equality, an interval's is "an int within its bounds"
        if type(b) is frozenset:
            if a <= b:
                if a:
                    _common(a, b, "\\subseteq")
                return True
            return False
        if type(b) is Interval:
            return not a or (set(map(type, a)) == _INT and b.lo <= min(a) and max(a) <= b.hi)
    return all(in_set(x, b) for x in iter_values(a))


_INT = {int}


def _domain(f):
    t = type(f)
    if t is tuple:
        return Interval(1, len(f))
    if t is Fcn:
        return frozenset(f.d)
    if isinstance(f, RecFcn):
        return f.dom
    if t is str:
        return Interval(1, len(f))
    raise EvalError(f"DOMAIN applied to {fmt(f)}, which is not a function")


def _big_union(s):
    out = []
    for x in iter_values(s):
        out.extend(as_frozenset(x))
    return set_of(out, "in UNION")


def _subset(s):
    if not is_set(s):
        raise EvalError(f"SUBSET applied to non-set {fmt(s)}")
    return PowerSet(s)


def _cardinality(s):
    if not is_set(s):
        raise EvalError(f"Cardinality applied to non-set {fmt(s)}")
    return card(s)


def _is_finite(s):
    if not is_set(s):
        raise EvalError(f"IsFiniteSet applied to non-set {fmt(s)}")
    return not _infinite(s)


def _infinite(s) -> bool:
    """Whether a set is infinite: Nat, Int, Seq(S) are; a union or difference with an
    infinite side (CombinedSet, built only then) is, unless it is a difference of two
    infinite sets, which this evaluator cannot decide (an error, not a guess)."""
    if isinstance(s, InfiniteSet):
        return True
    if isinstance(s, CombinedSet):
        if s.op == "cup":
            return _infinite(s.a) or _infinite(s.b)
        if not _infinite(s.a):
            return False
        if not _infinite(s.b):
            return True
        raise EvalError(f"cannot decide whether {fmt(s)} is finite (a difference of infinite sets)")
    return False


def _product(*parts):
    for p in parts:
        if not is_set(p):
            raise EvalError(f"\\X applied to non-set {fmt(p)}")
    return ProductSet(list(parts))


# ------------------------------------------------------------------ sequences
def _seq_check(name, s):
    if type(s) is not tuple:
        raise EvalError(f"{name} applied to {fmt(s)}, which is not a sequence")


def _seq(S):
    return InfiniteSet(f"Seq({fmt(S)})", lambda v: type(v) is tuple and all(in_set(x, S) for x in v))


def _len(s):
    if type(s) is str:
        return len(s)
    _seq_check("Len", s)
    return len(s)


def _append(s, e):
    _seq_check("Append", s)
    return s + (e,)


def _head(s):
    _seq_check("Head", s)
    if not s:
        raise EvalError("Head applied to the empty sequence")
    return s[0]


def _tail(s):
    _seq_check("Tail", s)
    if not s:
        raise EvalError("Tail applied to the empty sequence")
    return s[1:]


def _subseq(s, m, n):
    if type(s) is not str:
        _seq_check("SubSeq", s)
    if m > n:
        return s[:0]
    # (a string too: s[m - 1:n] with m < 1 wrapped round to the string's end)
    if m < 1 or n > len(s):
        raise EvalError(f"SubSeq({fmt(s)}, {m}, {n}) out of range")
    return s[m - 1:n]


def _concat(a, b):
    if type(a) is str and type(b) is str:
        return a + b
    _seq_check("\\o", a)
    _seq_check("\\o", b)
    return a + b


def _select_seq(s, test):
    _seq_check("SelectSeq", s)
    return tuple(x for x in s if _bool(test(x), "SelectSeq test"))


def _bool(v, what):
    if v is True or v is False:
        return v
    raise EvalError(f"{what} returned non-boolean {fmt(v)}")


# ------------------------------------------------------------------ TLC
def _colon_gt(d, e):
    return mk_fcn({d: e})


def _fcn_dict(f) -> dict:
    if type(f) is tuple:
        return {i + 1: x for i, x in enumerate(f)}
    if type(f) is Fcn:
        return f.d
    if isinstance(f, RecFcn):
        return _fcn_dict(f.materialize())
    raise EvalError(f"expected a function, got {fmt(f)}")


def _at_at(f, g):
    fd, gd = _fcn_dict(f), _fcn_dict(g)
    d = dict(gd)
    d.update(fd)
    if len(d) != len(fd) + len(gd):
        check_keys(fd, gd, "in the domains of f @@ g")
    return mk_fcn(d)


def _permutations(s):
    elems = sorted_values(s)
    return frozenset(mk_fcn(dict(zip(elems, p))) for p in itertools.permutations(elems))


def _print(out, val):
    sys.stdout.write(f"{fmt(out)}  {fmt(val)}\n")
    return val


def _printt(out):
    sys.stdout.write(f"{fmt(out)}\n")
    return True


def _assert(v, out):
    if v is not True:
        raise EvalError(f"Assert failed: {fmt(out) if type(out) is not str else out}")
    return True


def _to_string(v):
    return fmt(v)


class TLCContext:
    """Per-run values that TLCGet reads; the checker updates `level`, and sets `stats` (a
    record) while it evaluates a POSTCONDITION."""
    level = 0
    rng = random.Random(0)
    stats = None


def _tlc_get(key):
    if key == "level":
        return TLCContext.level
    if key == "stats" and TLCContext.stats is not None:
        return TLCContext.stats
    if key == "stats":
        raise EvalError('TLCGet("stats") is only supported in a POSTCONDITION')
    raise EvalError(f"TLCGet({fmt(key)}) is not supported")


def _random_element(s):
    return TLCContext.rng.choice(sorted_values(s))


def _sort_seq(s, op):
    _seq_check("SortSeq", s)
    import functools

    def cmp(a, b):
        if _bool(op(a, b), "SortSeq"):
            return -1
        if _bool(op(b, a), "SortSeq"):
            return 1
        return 0
    return tuple(sorted(s, key=functools.cmp_to_key(cmp)))


# ------------------------------------------------------------------ Bags
def _bag(b):
    d = _fcn_dict(b) if b != () else {}
    return d


def _set_to_bag(s):
    return mk_fcn({x: 1 for x in iter_values(s)})


def _bag_to_set(b):
    return frozenset(_bag(b))


def _bag_in(e, b):
    return set_has(e, _bag(b))


def _copies_in(e, b):
    d = _bag(b)
    return d[e] if set_has(e, d) else 0


def _bag_plus(a, b):
    check_keys(_bag(a), _bag(b), "in the domains of two bags")
    d = dict(_bag(a))
    for k, v in _bag(b).items():
        d[k] = d.get(k, 0) + v
    return mk_fcn(d)


def _bag_minus(a, b):
    check_keys(_bag(a), _bag(b), "in the domains of two bags")
    d = dict(_bag(a))
    for k, v in _bag(b).items():
        if k in d:
            n = d[k] - v
            if n > 0:
                d[k] = n
            else:
                del d[k]
    return mk_fcn(d)


def _bag_card(b):
    return sum(_bag(b).values())


def _is_a_bag(b):
    try:
        return all(type(v) is int and v > 0 for v in _bag(b).values())
    except EvalError:
        return False


def _sub_bag(a, b):
    da, db = _bag(a), _bag(b)
    check_keys(da, db, "in the domains of two bags")
    return all(db.get(k, 0) >= v for k, v in da.items())


NAT = InfiniteSet("Nat", lambda v: type(v) is int and v >= 0)
INT = InfiniteSet("Int", lambda v: type(v) is int)
STRING = InfiniteSet("STRING", lambda v: type(v) is str)
BOOLEAN = frozenset({False, True})

_B = Builtin
BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    _B("+", 2, _plus), _B("-", 2, _minus), _B("*", 2, _times), _B("^", 2, _pow),
    _B("\\div", 2, _div), _B("%", 2, _mod), _B("..", 2, _range), _B("-.", 1, _neg),
    _B("<", 2, _cmp("<", int.__lt__)), _B(">", 2, _cmp(">", int.__gt__)),
    _B("<=", 2, _cmp("<=", int.__le__)), _B(">=", 2, _cmp(">=", int.__ge__)),
    _B("\\cup", 2, _union), _B("\\cap", 2, _inter), _B("\\", 2, _minus_set),
    _B("\\subseteq", 2, _subseteq), _B("\\supseteq", 2, lambda a, b: _subseteq(b, a)),
    _B("\\subset", 2, lambda a, b: _subseteq(a, b) and as_frozenset(a) != as_frozenset(b)),
    _B("\\supset", 2, lambda a, b: _subseteq(b, a) and as_frozenset(a) != as_frozenset(b)),
    _B("DOMAIN", 1, _domain), _B("UNION", 1, _big_union), _B("SUBSET", 1, _subset),
    _B("Cardinality", 1, _cardinality), _B("IsFiniteSet", 1, _is_finite),
    _B("\\X", -1, _product),
    _B("Seq", 1, _seq), _B("Len", 1, _len), _B("Append", 2, _append), _B("Head", 1, _head),
    _B("Tail", 1, _tail), _B("SubSeq", 3, _subseq), _B("\\o", 2, _concat),
    _B("SelectSeq", 2, _select_seq, frozenset({1})),
    _B(":>", 2, _colon_gt), _B("@@", 2, _at_at), _B("Permutations", 1, _permutations),
    _B("Print", 2, _print, impure=True), _B("PrintT", 1, _printt, impure=True),
    _B("Assert", 2, _assert, impure=True), _B("ToString", 1, _to_string),
    _B("TLCGet", 1, _tlc_get, impure=True), _B("RandomElement", 1, _random_element, impure=True),
    _B("TLCEval", 1, lambda v: v), _B("SortSeq", 2, _sort_seq, frozenset({1})),
    _B("JavaTime", 0, lambda: 0, impure=True),
    _B("EmptyBag", 0, lambda: ()), _B("SetToBag", 1, _set_to_bag), _B("BagToSet", 1, _bag_to_set),
    _B("BagIn", 2, _bag_in), _B("CopiesIn", 2, _copies_in), _B("(+)", 2, _bag_plus),
    _B("(-)", 2, _bag_minus), _B("BagCardinality", 1, _bag_card), _B("IsABag", 1, _is_a_bag),
    _B("\\sqsubseteq", 2, _sub_bag),
]}

#: what each standard module makes visible to a module that EXTENDS it (or INSTANCEs it
#: unnamed), its own EXTENDS included (Integers extends Naturals; Sequences, FiniteSets,
#: TLC and Bags only LOCAL INSTANCE Naturals, so EXTENDS Sequences alone gives no `+`, as
#: in SANY). A builtin in none of them is TLA+'s own (\\cup, DOMAIN, SUBSET, ...), visible
#: everywhere; a module not listed here (the community modules) is taken to make every
#: builtin visible, so that nothing SANY accepts is refused.
_NATURALS = frozenset({"+", "-", "*", "^", "\\div", "%", "..", "<", ">", "<=", ">=", "Nat"})
MODULE_NAMES: dict[str, frozenset[str]] = {
    "Naturals": _NATURALS,
    "Integers": _NATURALS | {"-.", "Int"},
    "Reals": _NATURALS | {"-.", "Int"},
    "Sequences": frozenset({"Seq", "Len", "\\o", "Append", "Head", "Tail", "SubSeq", "SelectSeq"}),
    "FiniteSets": frozenset({"IsFiniteSet", "Cardinality"}),
    "TLC": frozenset({":>", "@@", "Print", "PrintT", "Assert", "JavaTime", "TLCGet", "ToString", "TLCEval",
                      "SortSeq", "Permutations", "RandomElement"}),
    "Bags": frozenset({"EmptyBag", "SetToBag", "BagToSet", "BagIn", "CopiesIn", "(+)", "(-)", "BagCardinality",
                       "IsABag", "\\sqsubseteq"}),
}
#: the builtins and constants some standard module provides (a name outside it is TLA+'s own)
MODULE_PROVIDED = frozenset().union(*MODULE_NAMES.values())

#: zero-arity constants of the standard modules
CONSTANTS = {"Nat": NAT, "Int": INT, "STRING": STRING, "BOOLEAN": BOOLEAN}

#: spellings the parser may keep -> canonical builtin name
SYNONYMS = {
    "\\union": "\\cup", "\\intersect": "\\cap", "\\setminus": "\\", "\\times": "\\X",
    "=<": "<=", "\\leq": "<=", "\\geq": ">=", "\\circ": "\\o", "\\oplus": "(+)", "\\ominus": "(-)",
    "\\land": "/\\", "\\lor": "\\/", "\\lnot": "~", "\\neg": "~", "\\equiv": "<=>", "/=": "#",
}
