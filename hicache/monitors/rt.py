"""Runtime support of the generated monitor modules (pure Python, no torch, no parser).

Generated code (hicache/monitors/generated/*.py) evaluates TLA+ expressions over the value
representation of `hicache.tla.values` (int, bool, str, frozenset, tuple, Fcn, lazy sets) and
calls the standard-module builtins of `hicache.tla.stdlib`, so a generated check and the
interpreter agree on every value by construction; only the control structure is generated.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from hicache.tla.errors import EvalError, TlaError
from hicache.tla.stdlib import BUILTINS, CONSTANTS as STD
from hicache.tla.values import (
    KK_BOOL, KK_DENSE0, KK_NESTED, Fcn, FcnSet, Interval, RecFcn, RecordSet, as_frozenset, fmt, has_bool, in_domain,
    in_set, iter_values, key_kinds, mk_fcn, normalize, sorted_values,
)

__all__ = [
    "BI", "STD", "FastPathFailed", "Failure", "Fcn", "FcnSet", "Interval", "RecordSet", "ap", "bool_free",
    "case_fail", "choose", "conj_error", "domain_is", "exc", "fast_ap", "in_c", "in_set", "it", "mk_fcn", "no_ap", "normalize",
    "once",
]

#: builtin implementations by TLA+ operator name
BI = {name: b.impl for name, b in BUILTINS.items()}
it = iter_values


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed conjunct of an action or invariant.

    `index` is the 1-based position of the conjunct in the definition's top-level
    conjunction, `text` its source text, `location` `spec/X.tla:line:col`; `error` is set
    when evaluating the conjunct raised instead of returning FALSE (e.g. a function applied
    outside its domain), which the monitor reports as the same violation.
    """
    property: str
    index: int
    text: str
    location: str
    error: str | None = None

    def describe(self) -> str:
        why = f" (evaluation error: {self.error})" if self.error else ""
        return f"{self.property} conjunct {self.index} at {self.location}: {self.text}{why}"


class FastPathFailed(Exception):
    """Raised by a generated fast path that did not find every conjunct TRUE: the exact
    conjunct-by-conjunct form then decides and names the failure."""


# ---------------------------------------------------------------- membership
# Python's True == 1 and False == 0 (with equal hashes), so its `in` finds TRUE in {0, 1, 2}
# and 1 in BOOLEAN: a refinement map writing a boolean where the spec has a slot id would
# pass TypeOK. The generated code asks `\in` through these (or, for BOOLEAN, tests the
# value's class; for a..b and sets of string literals, whose `in` cannot pair the two kinds,
# uses `in`), so it decides membership as the interpreter does (`in_set`: an evaluation error
# where a boolean is paired with an integer).

def in_c(x, s, free: bool) -> bool:
    """x \\in s for a constant-level set s, with `free` (bool_free(s), computed once per
    constants binding): in a set holding no boolean an integer or string member is one
    without a boolean paired with it, at C speed; anything else asks `in_set` (the
    interpreter's: an EvalError where a boolean would be paired with an integer)."""
    if free:
        if x in s:
            c = x.__class__
            return c is int or c is str or in_set(x, s)
        return False     # (TLA+'s membership implies Python's)
    return in_set(x, s)  # (a lazy set's own test, once: a function set's walks the function)


def bool_free(s) -> bool:
    """Whether s is a finite set of explicit elements (a frozenset) with no boolean in or
    inside any of them (in_c's flag)."""
    return type(s) is frozenset and not has_bool(s)


def domain_is(f, dom) -> bool:
    """DOMAIN f = dom, answered True only where that is certain: f a sequence (domain 1..n)
    or a function with no boolean or tuple key, dom a..b or a set with no boolean in it (so
    Python's 1 == TRUE cannot pair a key with an element). False: it is not, or it is not
    known (then whoever asked lets the exact forms decide)."""
    t = type(f)
    if t is tuple:
        n = len(f)
        if type(dom) is Interval:
            return (dom.lo == 1 and dom.hi == n) if n else dom.hi < dom.lo
        return type(dom) is frozenset and len(dom) == n and not has_bool(dom) and dom == frozenset(range(1, n + 1))
    if t is Fcn:
        kk = key_kinds(f)
        if kk & (KK_BOOL | KK_NESTED):
            return False
        if type(dom) is Interval:
            if kk & KK_DENSE0:      # (keys 0..len-1 as built: equal iff the bounds are)
                return dom.lo == 0 and dom.hi == len(f.d) - 1
            return len(f.d) == dom.card() and f.d.keys() == as_frozenset(dom)
        return type(dom) is frozenset and not has_bool(dom) and f.d.keys() == dom
    return False


def conj_error(prop: str, table: tuple, k: int, exc_: BaseException) -> Failure:
    text, loc = table[k - 1]
    # (the report says "evaluation error: <why>" itself: a toolkit error gives its message,
    # without its own "evaluation error:"; a Python error its type: "KeyError: 3")
    why = exc_.message if isinstance(exc_, TlaError) else f"{type(exc_).__name__}: {exc_}"
    return Failure(prop, k, text, loc, why)


def ap(f, x):
    """f[x] with the interpreter's domain rules (tuples are functions on 1..n)."""
    t = type(f)
    if t is Fcn:
        try:
            return f.d[x]
        except (KeyError, TypeError):
            raise EvalError(f"{fmt(x)} is not in the domain of {fmt(f)}") from None
    if t is tuple:
        if type(x) is int and 1 <= x <= len(f):
            return f[x - 1]
        raise EvalError(f"index {fmt(x)} is out of the domain 1..{len(f)} of {fmt(f)}")
    if t is RecFcn:
        return f.apply(x)
    raise EvalError(f"applying {fmt(f)}, which is not a function, to {fmt(x)}")


def fast_ap(f):
    """`lambda x: ap(f, x)` as one callable for a fast path (codegen._hoist_fast): a
    function's own dict lookup, whose only difference from `ap` is raising KeyError or
    TypeError instead of EvalError outside the domain; a fast path treats any exception as
    "run the exact form", so the two decide alike."""
    if type(f) is Fcn:
        return f.d.__getitem__
    if type(f) is tuple:
        def seq_at(x, _f=f):
            # a sequence is a function on 1..n: index x-1, refused below 1 (a negative index
            # would silently read from the end); IndexError above n
            if type(x) is int and x >= 1:
                return _f[x - 1]
            raise seq_error(x, _f)
        return seq_at
    return functools.partial(ap, f)


def seq_error(x, seq: tuple) -> EvalError:
    """What a sequence's reader raises for an index that is not an int in 1.. (seq_at)."""
    return EvalError(f"index {fmt(x)} is out of the domain 1..{len(seq)}")


def no_ap(f):
    """`fast_ap` of a function a fused fast path does not apply at this step (every conjunct
    applying it is skipped by its guard: codegen._gate_reads): a callable that reads
    nothing and returns None, which no running conjunct sees."""
    return _NO_READ


_NO_READ = {}.get      # (an empty dict's get: a C call, the element's read skipped)


def _readers():
    """(fast_ap, no_ap) for the generated code: the two above as C functions when the native
    loops build (hicache/monitors/csrc/incmap.c: a fast path calls them once per variable it
    reads, at every strict step; the C fast_ap does what the one above does for a function
    value and a sequence, and asks it for anything else), else the two above."""
    from hicache.monitors import native
    mod = native.module()
    if mod is None:
        return fast_ap, no_ap
    mod.configure_readers(Fcn, fast_ap, _NO_READ, seq_error)
    return mod.fast_ap, mod.no_ap


py_fast_ap, py_no_ap = fast_ap, no_ap
fast_ap, no_ap = _readers()


def _update(val, keys, fn):
    k = keys[0]
    if not in_domain(val, k):
        return val      # [f EXCEPT ![c] = e] = f when c \notin DOMAIN f (as the interpreter has it)
    old = ap(val, k)
    new = fn(old) if len(keys) == 1 else _update(old, keys[1:], fn)
    t = type(val)
    if t is tuple:
        lst = list(val)
        lst[k - 1] = new
        return tuple(lst)
    if t is Fcn:
        d = dict(val.d)
        d[k] = new
        return Fcn(d)
    if t is RecFcn:
        m = val.materialize()
        d = {i + 1: x for i, x in enumerate(m)} if type(m) is tuple else dict(m.d)
        d[k] = new
        return mk_fcn(d)
    raise EvalError(f"EXCEPT applied to non-function {fmt(val)}")


def exc(f, *changes):
    """[f EXCEPT !p1 = e1, ...]; each change is (keys tuple, fn(@) -> new value)."""
    for keys, fn in changes:
        f = _update(f, keys, fn)
    return f


def choose(s, pred):
    """CHOOSE x \\in s : pred(x), in the interpreter's deterministic order."""
    for x in sorted_values(s):
        if pred(x) is True:
            return x
    raise EvalError(f"CHOOSE found no element of {fmt(s)} satisfying the predicate")


def case_fail(loc: str):
    raise EvalError(f"no CASE arm applies and there is no OTHER ({loc})")


def once(fn):
    """A LET definition: evaluated at most once, on first use (as the interpreter does)."""
    cell: list = []

    def get():
        if not cell:
            cell.append(fn())
        return cell[0]
    return get
