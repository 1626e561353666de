"""TLA+ values as hashable Python objects.

Representation (chosen so that TLA+ equality is Python equality):
  integers      int            booleans   bool (TRUE/FALSE)
  strings       str            model values  ModelValue
  finite sets   frozenset      (or a LazySet, which hashes/compares as its frozenset)
  sequences and tuples  tuple  (a function whose domain is 1..n *is* a tuple)
  other functions and records  Fcn (a frozen mapping; records are Fcns over strings)
Invariant: a Fcn never has domain 1..n (n >= 0): `mk_fcn` normalizes those to tuples, so
`<<a, b>> = [i \\in 1..2 |-> ...]` and `<<>> = [x \\in {} |-> 0]` hold by Python equality.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from hicache.tla.errors import EvalError


class ModelValue:
    """A TLC model value: equal only to itself; interned by name."""
    __slots__ = ("name", "_hash")
    _interned: dict[str, "ModelValue"] = {}

    def __new__(cls, name: str) -> "ModelValue":
        mv = cls._interned.get(name)
        if mv is None:
            mv = super().__new__(cls)
            mv.name = name
            mv._hash = hash(("$mv", name))
            cls._interned[name] = mv
        return mv

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return (ModelValue, (self.name,))


class Fcn:
    """A finite function that is not a sequence (records included). Immutable."""
    __slots__ = ("d", "_hash")

    def __init__(self, d: dict):
        self.d = d
        self._hash = None

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(frozenset(self.d.items()))
        return h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fcn):
            return self.d == other.d
        if isinstance(other, RecFcn):
            return other.__eq__(self)
        return False

    def __repr__(self) -> str:
        return fmt(self)

    def __reduce__(self):
        return (Fcn, (self.d,))


def mk_fcn(d: dict) -> Any:
    """Build a function value, normalizing domain 1..n to a tuple (see module invariant)."""
    n = len(d)
    if n == 0:
        return ()
    # A sequence needs exactly the keys 1..n; bools are ints in Python, so exclude them.
    if all(type(k) is int for k in d):
        if min(d) == 1 and max(d) == n:
            return tuple(d[i] for i in range(1, n + 1))
    return Fcn(d)


class LazySet:
    """A set kept symbolic until it must be enumerated; compares/hashes as its frozenset."""
    __slots__ = ("_mat",)

    def contains(self, v: Any) -> bool:
        raise NotImplementedError

    def enumerate(self) -> Iterator[Any]:
        raise NotImplementedError

    def card(self) -> int:
        return len(self.materialize())

    def materialize(self) -> frozenset:
        m = getattr(self, "_mat", None)
        if m is None:
            m = frozenset(self.enumerate())
            self._mat = m
        return m

    def __iter__(self):
        return iter(self.materialize())

    def __len__(self) -> int:
        return self.card()

    def __contains__(self, v: Any) -> bool:
        return self.contains(v)

    def __hash__(self) -> int:
        return hash(self.materialize())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (frozenset, LazySet)):
            return self.materialize() == as_frozenset(other)
        return False

    def __repr__(self) -> str:
        return fmt(self)


class Interval(LazySet):
    """a..b"""
    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi
        self._mat = None

    def contains(self, v):
        return type(v) is int and self.lo <= v <= self.hi

    __contains__ = contains     # `x in a..b` skips LazySet's indirection (hot in monitors)

    def enumerate(self):
        return iter(range(self.lo, self.hi + 1))

    def __iter__(self):
        return iter(range(self.lo, self.hi + 1))

    def card(self):
        return max(0, self.hi - self.lo + 1)


class InfiniteSet(LazySet):
    """Nat, Int, STRING, Seq(S): membership only."""
    __slots__ = ("name", "pred")

    def __init__(self, name: str, pred):
        self.name, self.pred = name, pred
        self._mat = None

    def contains(self, v):
        return self.pred(v)

    def enumerate(self):
        raise EvalError(f"attempted to enumerate the infinite set {self.name}")

    def card(self):
        raise EvalError(f"attempted to compute the cardinality of the infinite set {self.name}")

    def __hash__(self):
        return hash(("$inf", self.name))

    def __eq__(self, other):
        if isinstance(other, InfiniteSet):
            return self.name == other.name
        return False


class CombinedSet(LazySet):
    """A \\cup / \\ of sets where a side is infinite: membership only (Nat \\ {0})."""
    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a, b):
        self.op, self.a, self.b = op, a, b
        self._mat = None

    def contains(self, v):
        if self.op == "cup":
            return in_set(v, self.a) or in_set(v, self.b)
        return in_set(v, self.a) and not in_set(v, self.b)

    def enumerate(self):
        raise EvalError(f"attempted to enumerate the infinite set {fmt(self)}")

    def card(self):
        raise EvalError(f"attempted to compute the cardinality of the infinite set {fmt(self)}")

    def __hash__(self):
        return hash(("$comb", self.op, self.a, self.b))

    def __eq__(self, other):
        return isinstance(other, CombinedSet) and (self.op, self.a, self.b) == (other.op, other.a, other.b)


def is_infinite(s) -> bool:
    return isinstance(s, (InfiniteSet, CombinedSet))


class PowerSet(LazySet):
    """SUBSET S"""
    __slots__ = ("base",)

    def __init__(self, base):
        self.base = base
        self._mat = None

    def contains(self, v):
        return isinstance(v, (frozenset, LazySet)) and all(in_set(x, self.base) for x in v)

    def enumerate(self):
        elems = sorted_values(self.base)
        for r in range(len(elems) + 1):
            for c in itertools.combinations(elems, r):
                yield frozenset(c)

    def card(self):
        return 2 ** card(self.base)


_INT_ONLY = {int}


class FcnSet(LazySet):
    """[S -> T]"""

    __slots__ = ("dom", "rng", "_domset")

    def __init__(self, dom, rng):
        self.dom, self.rng = dom, rng
        self._mat = None
        self._domset = None

    def contains(self, v):
        d = self._domset
        if d is None:
            d = self._domset = as_frozenset(self.dom)
        rng = self.rng
        if type(v) is tuple:
            if len(d) != len(v) or not d.issuperset(range(1, len(v) + 1)):
                return False
            vals = v
        elif type(v) is Fcn:
            if v.d.keys() != d:
                return False
            vals = v.d.values()
        else:
            return False
        # the same membership tests as `all(in_set(x, rng) ...)`, each in one C loop
        if type(rng) is frozenset:
            return rng.issuperset(vals)
        if type(rng) is Interval:
            # every value an int (not a bool: Interval.contains) between the bounds
            return not vals or (set(map(type, vals)) == _INT_ONLY
                                and rng.lo <= min(vals) and max(vals) <= rng.hi)
        return all(in_set(x, rng) for x in vals)

    def enumerate(self):
        dom = sorted_values(self.dom)
        rng = sorted_values(self.rng)
        for combo in itertools.product(rng, repeat=len(dom)):
            yield mk_fcn(dict(zip(dom, combo)))

    def card(self):
        return card(self.rng) ** card(self.dom)


class RecordSet(LazySet):
    """[a : S, b : T]"""
    __slots__ = ("fields",)

    def __init__(self, fields: dict):
        self.fields = fields
        self._mat = None

    def contains(self, v):
        return (isinstance(v, Fcn) and v.d.keys() == self.fields.keys()
                and all(in_set(v.d[k], s) for k, s in self.fields.items()))

    def enumerate(self):
        keys = list(self.fields)
        for combo in itertools.product(*(sorted_values(self.fields[k]) for k in keys)):
            yield Fcn(dict(zip(keys, combo)))


class ProductSet(LazySet):
    """S1 \\X S2 \\X ..."""
    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts
        self._mat = None

    def contains(self, v):
        return (isinstance(v, tuple) and len(v) == len(self.parts)
                and all(in_set(x, s) for x, s in zip(v, self.parts)))

    def enumerate(self):
        return itertools.product(*(sorted_values(p) for p in self.parts))

    def card(self):
        n = 1
        for p in self.parts:
            n *= card(p)
        return n


class RecFcn:
    """A recursively defined function f[x \\in S] == e, evaluated on demand and memoized.

    Its domain may be infinite (Nat); it materializes only when compared or hashed.
    """
    __slots__ = ("dom", "body", "memo", "_mat")

    def __init__(self, dom, body):
        self.dom = dom          # a set value
        self.body = body        # callable(arg) -> value
        self.memo: dict = {}
        self._mat = None

    def apply(self, x):
        try:
            return self.memo[x]
        except KeyError:
            pass
        if not in_set(x, self.dom):
            raise EvalError(f"argument {fmt(x)} is not in the domain of a recursive function")
        v = self.body(x)
        self.memo[x] = v
        return v

    def materialize(self):
        if self._mat is None:
            self._mat = mk_fcn({x: self.apply(x) for x in as_frozenset(self.dom)})
        return self._mat

    def __hash__(self):
        return hash(self.materialize())

    def __eq__(self, other):
        if isinstance(other, RecFcn):
            other = other.materialize()
        return self.materialize() == other

    def __repr__(self):
        return fmt(self.materialize())


class Closure:
    """An operator value: a LAMBDA or an operator passed as an argument."""
    __slots__ = ("fn", "arity", "name")

    def __init__(self, fn, arity: int, name: str = "LAMBDA"):
        self.fn, self.arity, self.name = fn, arity, name

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self):
        return f"<operator {self.name}>"


SET_TYPES = (frozenset, LazySet)


def is_set(v) -> bool:
    return isinstance(v, SET_TYPES)


def as_frozenset(v) -> frozenset:
    if type(v) is frozenset:
        return v
    if isinstance(v, LazySet):
        return v.materialize()
    raise EvalError(f"expected a set, got {fmt(v)}")


def in_domain(f, k) -> bool:
    """k \\in DOMAIN f, for EXCEPT: whether a change at k applies (`[f EXCEPT ![k] = e]` is f
    when k is outside the domain, by its definition). True for a non-function, whose
    application then reports it."""
    t = type(f)
    if t is tuple:
        return type(k) is int and 1 <= k <= len(f)
    if t is Fcn:
        try:
            return k in f.d
        except TypeError:
            return False
    if t is RecFcn:
        return in_set(k, f.dom)
    return True


def in_set(x, s) -> bool:
    if type(s) is frozenset:
        return x in s
    if isinstance(s, LazySet):
        return s.contains(x)
    raise EvalError(f"\\in applied to a non-set {fmt(s)}")


def card(s) -> int:
    if type(s) is frozenset:
        return len(s)
    if isinstance(s, LazySet):
        return s.card()
    raise EvalError(f"Cardinality of a non-set {fmt(s)}")


# ---------------------------------------------------------------- ordering (TLC-like)
_RANK = {bool: 0, int: 1, str: 2, ModelValue: 3, tuple: 4, Fcn: 5, frozenset: 6}


def sort_key(v):
    """A total order close to TLC's normalized order: used by CHOOSE and printing."""
    t = type(v)
    if t is int:
        return (1, v)
    if t is bool:
        return (0, v)
    if t is str:
        return (2, v)
    if t is ModelValue:
        return (3, v.name)
    if t is tuple:
        return (4, len(v), tuple(sort_key(x) for x in v))
    if t is Fcn:
        items = sorted(((sort_key(k), sort_key(x)) for k, x in v.d.items()))
        return (5, len(items), tuple(items))
    if isinstance(v, RecFcn):
        return sort_key(v.materialize())
    if isinstance(v, SET_TYPES):
        fs = as_frozenset(v)
        return (6, len(fs), tuple(sorted(sort_key(x) for x in fs)))
    return (9, repr(v))


def sorted_values(s) -> list:
    """Elements of a set value in TLC-like order (deterministic enumeration)."""
    if isinstance(s, Interval):
        return list(range(s.lo, s.hi + 1))
    fs = as_frozenset(s)
    try:
        return sorted(fs, key=sort_key)
    except TypeError:  # pragma: no cover - heterogeneous keys are still ordered by rank
        return sorted(fs, key=lambda v: repr(v))


# ---------------------------------------------------------------- printing (TLC style)
def fmt(v) -> str:
    t = type(v)
    if t is bool:
        return "TRUE" if v else "FALSE"
    if t is int:
        return str(v)
    if t is str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if t is ModelValue:
        return v.name
    if t is tuple:
        return "<<" + ", ".join(fmt(x) for x in v) + ">>"
    if t is Fcn:
        if v.d and all(type(k) is str for k in v.d):
            return "[" + ", ".join(f"{k} |-> {fmt(x)}" for k, x in sorted(v.d.items())) + "]"
        items = sorted(v.d.items(), key=lambda kv: sort_key(kv[0]))
        return "(" + " @@ ".join(f"{fmt(k)} :> {fmt(x)}" for k, x in items) + ")"
    if isinstance(v, InfiniteSet):
        return v.name
    if isinstance(v, CombinedSet):
        op = "\\cup" if v.op == "cup" else "\\"
        return "(" + fmt(v.a) + " " + op + " " + fmt(v.b) + ")"
    if isinstance(v, Interval):
        return f"{v.lo}..{v.hi}"
    if isinstance(v, SET_TYPES):
        return "{" + ", ".join(fmt(x) for x in sorted_values(v)) + "}"
    if isinstance(v, RecFcn):
        return fmt(v.materialize())
    if isinstance(v, Closure):
        return repr(v)
    return repr(v)


def changes(name: str, a, b) -> dict[str, list[str]]:
    """What changed in one variable, formatted: per entry when a function keeps its domain
    (a tuple its length), recursively, so a one-slot change in a large map reads
    `host[9]: 1 -> 0` (and in a cross-rank trace, whose variables map ranks to values,
    `host[1][9]: 1 -> 0`); {} when nothing did."""
    if a == b:
        return {}
    out: dict[str, list[str]] = {}
    if isinstance(a, Fcn) and isinstance(b, Fcn) and a.d.keys() == b.d.keys():
        for k in a.d:
            out.update(changes(f"{name}[{fmt(k)}]", a.d[k], b.d[k]))
        return out
    if type(a) is tuple and type(b) is tuple and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b), 1):
            out.update(changes(f"{name}[{i}]", x, y))
        return out
    return {name: [fmt(a), fmt(b)]}


def value_kind(v) -> str | None:
    """What TLC compares a value as: "a boolean", "an integer", "a string", "a set",
    "a function" (tuples, records and functions alike); None for a model value, which
    compares (unequal) with anything."""
    t = type(v)
    if t is bool:
        return "a boolean"
    if t is int:
        return "an integer"
    if t is str:
        return "a string"
    if t is ModelValue:
        return None
    if t is frozenset or isinstance(v, LazySet):
        return "a set"
    return "a function"


def kinds_differ(a, b) -> str | None:
    """Why TLC refuses to compare a with b (values of different kinds, neither a model
    value), or None. Called only when their Python types differ: Python's 1 == TRUE holds,
    TLA+'s does not."""
    ka, kb = value_kind(a), value_kind(b)
    if ka is None or kb is None or ka == kb:
        return None
    return f"attempted to compare {ka} {fmt(a)} with {kb} {fmt(b)}"


def normalize(v):
    """Deep-materialize lazy values so a value can be stored in a state."""
    t = type(v)
    if t in (int, bool, str, ModelValue):
        return v
    if t is tuple:
        return tuple(normalize(x) for x in v) if any(_needs_norm(x) for x in v) else v
    if t is frozenset:
        return frozenset(normalize(x) for x in v) if any(_needs_norm(x) for x in v) else v
    if t is Fcn:
        if any(_needs_norm(x) for x in v.d.values()) or any(_needs_norm(k) for k in v.d):
            return Fcn({normalize(k): normalize(x) for k, x in v.d.items()})
        return v
    if isinstance(v, LazySet):
        return frozenset(normalize(x) for x in v.materialize())
    if isinstance(v, RecFcn):
        return normalize(v.materialize())
    return v


def _needs_norm(v) -> bool:
    t = type(v)
    if t in (int, bool, str, ModelValue):
        return False
    if t is tuple:
        return any(_needs_norm(x) for x in v)
    if t is frozenset:
        return any(_needs_norm(x) for x in v)
    if t is Fcn:
        return any(_needs_norm(x) for x in v.d.values())
    return True


def permute(v, perm: dict):
    """Apply a permutation of model values (SYMMETRY) to a value, deeply."""
    t = type(v)
    if t is ModelValue:
        return perm.get(v, v)
    if t in (int, bool, str):
        return v
    if t is tuple:
        return tuple(permute(x, perm) for x in v)
    if t is frozenset:
        return frozenset(permute(x, perm) for x in v)
    if t is Fcn:
        return Fcn({permute(k, perm): permute(x, perm) for k, x in v.d.items()})
    if isinstance(v, LazySet):
        return frozenset(permute(x, perm) for x in v.materialize())
    return v


def iter_values(v) -> Iterable:
    """Elements of a set value. The order follows Python's set iteration, which for strings
    and model values depends on PYTHONHASHSEED; `hicache check` pins the seed (cli/main.py),
    so its exploration order and counterexamples are reproducible run to run."""
    if type(v) is frozenset:
        return v
    if isinstance(v, Interval):
        return range(v.lo, v.hi + 1)
    if isinstance(v, LazySet):
        return v.enumerate()
    raise EvalError(f"expected a set to enumerate, got {fmt(v)}")
