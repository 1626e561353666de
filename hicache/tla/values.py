"""TLA+ values as hashable Python objects.

Representation (chosen so that TLA+ equality is Python equality, but for one exception):
  integers      int            booleans   bool (TRUE/FALSE)
  strings       str            model values  ModelValue
  finite sets   frozenset      (or a LazySet, which hashes/compares as its frozenset)
  sequences and tuples  tuple  (a function whose domain is 1..n *is* a tuple)
  other functions and records  Fcn (a frozen mapping; records are Fcns over strings)
Invariant: a Fcn never has domain 1..n (n >= 0): `mk_fcn` normalizes those to tuples, so
`<<a, b>> = [i \\in 1..2 |-> ...]` and `<<>> = [x \\in {} |-> 0]` hold by Python equality.
The exception: a Python bool is an int (True == 1, hash(True) == hash(1)), where TLA+'s TRUE is
no integer and TLC refuses to compare the two. Every place where Python's equality could
pair a boolean with an integer (=, \\in, building a set or a function's domain, the checker's
seen-set) asks `crossing` whether it did, at a cost paid only where it can happen (see
"Booleans are not integers" below).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from operator import is_ as _is
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
    """A finite function that is not a sequence (records included). Immutable.
    `kk`: the kinds of its keys (KK_* bits, `key_kinds`), computed when first needed."""
    __slots__ = ("d", "_hash", "kk")

    def __init__(self, d: dict, kk: int | None = None):
        self.d = d
        self._hash = None
        self.kk = kk

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
        return NotImplemented

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
        return Fcn(d, KK_INT)       # (its key kinds, known here)
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
        return NotImplemented

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
        return False if isinstance(other, SET_TYPES) else NotImplemented


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
        if isinstance(other, CombinedSet):
            return (self.op, self.a, self.b) == (other.op, other.a, other.b)
        return False if isinstance(other, SET_TYPES) else NotImplemented


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

    __slots__ = ("dom", "rng", "_domset", "_dbool", "_rtypes")

    def __init__(self, dom, rng):
        self.dom, self.rng = dom, rng
        self._mat = None
        self._domset = None
        self._rtypes = None

    def contains(self, v):
        d = self._domset
        if d is None:
            d = self._domset = as_frozenset(self.dom)
            self._dbool = has_bool(d)
        rng = self.rng
        if type(v) is tuple:
            if len(d) != len(v) or not d.issuperset(range(1, len(v) + 1)):
                return False
            if self._dbool:
                # (Python's 1 == TRUE: a domain {TRUE, 2} took <<a, b>>'s 1..2 for itself)
                raise EvalError(crossing_error((True, 1), what=f"is {fmt(v)} in [{fmt(self.dom)} -> {fmt(self.rng)}]?"))
            vals = v
        elif type(v) is Fcn:
            if v.d.keys() != d:
                return False
            if self._dbool or key_kinds(v) & KK_BOOL:
                r = _cross_set(v.d.keys(), d)
                if r is not None:
                    raise EvalError(crossing_error(r, what=f"is {fmt(v)} in [{fmt(self.dom)} -> {fmt(self.rng)}]?"))
            vals = v.d.values()
        else:
            return False
        # the same membership tests as `all(in_set(x, rng) ...)`, each in one C loop
        if type(rng) is frozenset:
            rt = self._rtypes
            if rt is None:
                rt = self._rtypes = frozenset(map(type, rng))
            if not rt <= _NAMES and vals:
                # a value paired with a member of another type (TRUE with 1) only where the
                # types allow it: then the member test that refuses it, value by value, in
                # the definition's order
                tv = set(map(type, vals))
                if (bool in tv and int in rt) or (int in tv and bool in rt) \
                        or not (_CONTAINERS.isdisjoint(tv) or _CONTAINERS.isdisjoint(rt)):
                    return all(set_has(x, rng) for x in vals)
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
            yield Fcn(dict(zip(keys, combo)), 0)   # (a record: string keys)


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
            v = self.memo[x]
        except KeyError:
            pass
        else:
            if is_plain(x) or crossing(x, stored(self.memo, x)) is None:
                return v
            # (Python's TRUE == 1 found the value of another argument: the domain decides)
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
_SETS = frozenset({frozenset, Interval, InfiniteSet, CombinedSet, PowerSet, FcnSet, RecordSet, ProductSet})
_SYMBOLIC = frozenset({InfiniteSet, CombinedSet})     # sets that are never enumerated
#: types whose values may hold a boolean inside (or equal a set that does)
_CONTAINERS = _SETS | {tuple, Fcn, RecFcn}
_NAMES = frozenset({str, ModelValue})                 # types no boolean is paired with
_ATOMS = frozenset({int, str, ModelValue})            # values with nothing inside (booleans aside)


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
        return set_has(x, s)
    if isinstance(s, LazySet):
        return s.contains(x)
    raise EvalError(f"\\in applied to a non-set {fmt(s)}")


def card(s) -> int:
    if type(s) is frozenset:
        return len(s)
    if isinstance(s, LazySet):
        return s.card()
    raise EvalError(f"Cardinality of a non-set {fmt(s)}")


# ---------------------------------------------------------------- booleans are not integers
# Python's True == 1 and hash(True) == hash(1) (False and 0 alike): its equality, sets and dicts
# take TLA+'s TRUE for the integer 1, so `<<1>> = <<TRUE>>`, `1 \in BOOLEAN` and
# `[a |-> 1] = [a |-> TRUE]` held, `{TRUE, 1}` had one element, and two states differing only
# by TRUE where the other has 1 were one state. TLC refuses to compare a boolean with an
# integer, and its fingerprints tell them apart. So wherever Python's equality *paired* two
# values (an equality that held, a member found, two elements merged into one set or one
# domain, a state found in the seen-set), `crossing` looks for a boolean paired with an
# integer inside them. It costs little where none can be: identical objects, elements of
# matching types, and strings, model values and integers other than 0 and 1 end the search
# at once (mostly at C speed); only elements that can hold a boolean are looked into.

_NONE = object()    # "no such element"


class _Probe:
    """Finds the element of a set, or the key of a dict, that Python's equality pairs with a
    value: the lookup compares each stored candidate of the same hash with the probe; every
    value type declines to compare itself with a foreign type (NotImplemented), so Python asks
    the probe, which keeps the candidate it was compared with."""
    __slots__ = ("v", "h", "hit")

    def __init__(self, v):
        self.v, self.h, self.hit = v, hash(v), _NONE

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        if self.v == other:
            self.hit = other
            return True
        return False


def stored(container, x):
    """The element of a frozenset (or the key of a dict, or of a dict's keys view) that
    Python's equality pairs with x; _NONE when there is none."""
    if type(x) is ModelValue:       # (a model value answers for itself: identity)
        return x if x in container else _NONE
    p = _Probe(x)
    return p.hit if p in container else _NONE


KK_BOOL, KK_INT, KK_NESTED = 1, 2, 4
#: f's keys are exactly the integers 0..len(f.d)-1: given by whoever builds such a dict
#: (`dict(enumerate(values))`), never found by key_kinds (a function built otherwise lacks
#: it), and kept by EXCEPT, which keeps the keys; a domain test then needs only the length
KK_DENSE0 = 8


def key_kinds(f: Fcn) -> int:
    """What f's keys hold: KK_BOOL (a boolean, at any depth: <<p, TRUE>>), KK_INT (an integer
    key), KK_NESTED (a key that is a set or a function, or a tuple holding one); kept on f,
    and passed on by EXCEPT (the same keys). Python's equality cannot pair a key with a
    boolean inside unless f's keys or the argument hold one: so f[1] and f[<<p, 1>>] need no
    further look then."""
    kk = f.kk
    if kk is None:
        types = set(map(type, f.d))
        kk = (KK_INT if int in types else 0) | (KK_BOOL if bool in types else 0)
        if not _CONTAINERS.isdisjoint(types):
            for k in f.d:
                t = type(k)
                if t is tuple:
                    kt = set(map(type, k))
                    if bool in kt:
                        kk |= KK_BOOL
                    if not _CONTAINERS.isdisjoint(kt):
                        kk |= KK_NESTED | (KK_BOOL if has_bool(k) else 0)
                elif t in _CONTAINERS:
                    kk |= KK_NESTED | (KK_BOOL if has_bool(k) else 0)
        f.kk = kk
    return kk


def has_bool(v) -> bool:
    """Whether a boolean is v or is inside v (a tuple, set or function, at any depth)."""
    t = type(v)
    if t is bool:
        return True
    if t is tuple or t is frozenset:
        return _any_bool(v)
    if t is Fcn:
        return bool(key_kinds(v) & KK_BOOL) or has_bool(tuple(v.d.values()))
    if t is RecFcn:
        return has_bool(v.materialize())
    if t in _SETS and t not in _SYMBOLIC:
        return has_bool(v.materialize())
    return False


def _any_bool(elements) -> bool:
    """Whether a boolean is among or inside the elements (of a tuple, set, dict keys view)."""
    types = set(map(type, elements))
    return bool in types or (not _CONTAINERS.isdisjoint(types) and any(map(has_bool, elements)))


def fcn_key_ok(f: Fcn, x) -> bool:
    """Whether the key of f that Python's equality found for x (x in f.d) pairs no boolean
    with an integer, without looking it up: mostly decided by x's type and f's key kinds."""
    t = type(x)
    if t is str or t is ModelValue:
        return True
    if t is int:
        return not 0 <= x <= 1 or not key_kinds(f) & KK_BOOL
    if t is bool:
        return not key_kinds(f) & KK_INT
    kk = key_kinds(f)
    if kk & KK_BOOL:
        return False
    if t is tuple and not kk & KK_NESTED:
        # (the keys are tuples of names and integers: x pairs with one only if x is such a
        # tuple too, where a boolean may stand for an integer)
        return bool not in map(type, x)
    return not has_bool(x)


def is_plain(x) -> bool:
    """Whether x is a value no boolean can pair with: Python's equality pairs a string, a model
    value or an integer other than 0 and 1 only with a value of its own type."""
    t = type(x)
    return t is str or t is ModelValue or (t is int and not 0 <= x <= 1)


def crossing(a, b):
    """For values that Python's equality pairs (a == b): a pair (x, y) at the same place inside
    them, one a boolean and the other an integer; None when there is none (then a = b in TLA+
    too; otherwise TLC would have refused to compare x with y)."""
    if a is b:
        return None
    t = type(a)
    if t is not type(b):
        if t is bool or type(b) is bool:
            return (a, b)
        return _cross_other(a, b)
    if t is tuple:
        return _cross_seq(a, b)
    if t is Fcn:
        return _cross_fcn(a, b)
    if t is frozenset:
        return _cross_set(a, b)
    if t in _CONTAINERS:
        return _cross_other(a, b)
    return None


def _cross_seq(a, b):
    """crossing() over two sequences (tuples, lists, dict values views) whose elements pair
    up in order. (A plain loop: most pairs are one object, as small integers, booleans and
    unchanged parts of a state are; compound pairs of identical elements end at C speed.)"""
    for x, y in zip(a, b):
        if x is y:
            continue
        t = type(x)
        if t is not type(y):
            if t is bool or type(y) is bool:
                return (x, y)
            r = _cross_other(x, y)
        elif t is tuple or t is frozenset:
            if all(map(_is, x, y)):
                continue
            r = _cross_seq(x, y) if t is tuple else _cross_set(x, y)
        elif t is Fcn:
            xd, yd = x.d, y.d
            if all(map(_is, xd, yd)) and all(map(_is, xd.values(), yd.values())):
                continue
            r = _cross_fcn(x, y)
        elif t in _CONTAINERS:
            r = _cross_other(x, y)
        else:
            continue
        if r is not None:
            return r
    return None


def _cross_fcn(a: Fcn, b: Fcn):
    """crossing() over two functions: their domains, then their values key by key."""
    ad, bd = a.d, b.d
    if all(map(_is, ad, bd)):       # the same key objects in the same order
        return _cross_seq(ad.values(), bd.values())
    if (key_kinds(a) | key_kinds(b)) & KK_BOOL:     # (else no key holds a boolean)
        r = _cross_set(ad.keys(), bd.keys())
        if r is not None:
            return r
    return _cross_seq(ad.values(), map(bd.__getitem__, ad))


def _cross_set(a, b):
    """crossing() over two equal sets (frozensets or dict keys views)."""
    if all(map(_is, a, b)):         # the same element objects in the same order
        return None
    la, lb = list(a), list(b)
    if la == lb:                    # (in the same order: the elements pair up in place)
        return _cross_seq(la, lb)
    return cross_common(a, b)


def _cross_other(x, y):
    """crossing() for the rarer forms: lazy sets (beside a set or their own kind), recursive
    functions (beside a function)."""
    tx, ty = type(x), type(y)
    if tx is RecFcn or ty is RecFcn:
        return crossing(x.materialize() if tx is RecFcn else x, y.materialize() if ty is RecFcn else y)
    if tx is CombinedSet and ty is CombinedSet:
        return crossing((x.a, x.b), (y.a, y.b))
    if tx in _SETS and ty in _SETS and tx not in _SYMBOLIC and ty not in _SYMBOLIC \
            and not (tx is Interval and ty is Interval):
        return _cross_set(as_frozenset(x), as_frozenset(y))
    return None


def cross_common(a, b):
    """A boolean/integer pair inside x in a and y in b that Python's equality pairs (x == y),
    for sets or dict keys views a and b; None when there is none. For \\cup, \\cap, \\,
    \\subseteq, @@: the elements (keys) they have in common are compared in TLA+."""
    if len(b) < len(a):
        a, b = b, a
    # no pair without a boolean on one side: the smaller side is always looked at (element
    # types at C speed, then compound elements), the other unless it is large (then only
    # a's 0, 1 and compound elements are looked up in it)
    types = set(map(type, a))
    if bool not in types:
        if types <= _ATOMS:
            # a holds atoms only (no boolean): only its 0 and 1 can be paired with a boolean
            # of b, looked up directly (the loop below calls is_plain per element of a: 65 us
            # where this takes 12 for 298 integers against 2000)
            if len(b) <= 64 and bool not in set(map(type, b)):
                return None
            for x in (0, 1):
                if x in a:
                    y = stored(b, x)
                    if y is not _NONE and type(y) is bool:
                        return (x, y)
            return None
        # (_any_bool(a), on the types already taken: a boolean can only be inside an element)
        inside = not _CONTAINERS.isdisjoint(types) and any(map(has_bool, a))
        if not inside and (len(b) <= 64 and not _any_bool(b) or all(map(is_plain, a))):
            return None
    for x in a:
        if is_plain(x):
            continue
        y = stored(b, x)
        if y is not _NONE and y is not x:
            r = crossing(x, y)
            if r is not None:
                return r
    return None


def crossing_error(pair, a=None, b=None, what: str = "") -> str:
    """The message of an evaluation error for a boolean paired with an integer (TLC's
    "Attempted to compare"), naming the enclosing values a and b when the pair is inside them."""
    x, y = pair
    msg = f"attempted to compare {value_kind(x)} {fmt(x)} with {value_kind(y)} {fmt(y)}"
    if a is not None and not (a is x and b is y):
        msg += f" (comparing {fmt(a)} with {fmt(b)})"
    if what:
        msg += f" ({what})"
    return msg


def tla_eq(x, y) -> bool:
    """TLA+'s x = y: an EvalError (without a location) where TLC refuses the comparison,
    values of different kinds (`kinds_differ`) or a boolean paired with an integer inside
    them (`crossing`)."""
    if type(x) is not type(y):
        why = kinds_differ(x, y)
        if why is not None:
            raise EvalError(why)
    if x == y:
        if x is not y and type(x) in _CONTAINERS:
            r = crossing(x, y)
            if r is not None:
                raise EvalError(crossing_error(r, x, y))
        return True
    return False


def set_has(x, s) -> bool:
    """x \\in s for a frozenset s (or a dict, for its keys): an EvalError where the member
    Python found is a boolean and x an integer, or holds one where x holds the other."""
    if x in s:
        t = type(x)
        if not (t is str or t is ModelValue or (t is int and not 0 <= x <= 1)):
            y = stored(s, x)
            if y is not x:
                r = crossing(x, y)
                if r is not None:
                    raise EvalError(crossing_error(r, x, y, f"is {fmt(x)} in {fmt(s)}?"
                                                   if type(s) is frozenset else ""))
        return True
    return False


def set_of(items: list, what: str = "in one set") -> frozenset:
    """frozenset(items), as TLC builds a set: an EvalError where Python's equality would merge
    a boolean with an integer (`{TRUE, 1}`, `{<<1>>, <<TRUE>>}`). Only a set that merged
    elements, and holds booleans beside integers or holds compound values, is looked into."""
    s = frozenset(items)
    if len(s) != len(items):
        types = set(map(type, items))
        if (bool in types and int in types) or not _CONTAINERS.isdisjoint(types):
            first: dict = {}
            for x in items:
                y = first.setdefault(x, x)
                if y is not x:
                    r = crossing(y, x)
                    if r is not None:
                        raise EvalError(crossing_error(r, y, x, what))
    return s


def check_keys(ad, bd, what: str):
    """An EvalError where two functions' (or bags') domains share a key only by Python's
    equality pairing a boolean with an integer (f @@ g, bags)."""
    r = cross_common(ad.keys(), bd.keys())
    if r is not None:
        raise EvalError(crossing_error(r, what=what))


_TAG_TRUE, _TAG_FALSE, _TAG_FCN = object(), object(), object()


def tagged(v):
    """A key for v under which booleans are not integers (TRUE and 1 give different keys):
    for the seen-set's rare states that Python's equality pairs with a seen state while
    `crossing` tells them apart. No plain value equals a tagged one that holds a boolean."""
    t = type(v)
    if t is bool:
        return _TAG_TRUE if v else _TAG_FALSE
    if t is tuple:
        return tuple(map(tagged, v))
    if t is frozenset:
        return frozenset(map(tagged, v))
    if t is Fcn:
        return (_TAG_FCN, frozenset((tagged(k), tagged(x)) for k, x in v.d.items()))
    if t is RecFcn:
        return tagged(v.materialize())
    if t in _SETS and t not in _SYMBOLIC:
        return frozenset(map(tagged, v.materialize()))
    return v


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
    `host[1][9]: 1 -> 0`); {} when nothing did (1 -> TRUE is a change: `crossing`)."""
    if a == b and crossing(a, b) is None:
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
    so its exploration order and counterexamples are reproducible run to run. (A mutable
    `set` is enumerated as its frozenset would be: the incremental monitors hand their dirty
    elements to the generated checks as the sets their sync built, not copied.)"""
    t = type(v)
    if t is frozenset or t is set:
        return v
    if isinstance(v, Interval):
        return range(v.lo, v.hi + 1)
    if isinstance(v, LazySet):
        return v.enumerate()
    raise EvalError(f"expected a set to enumerate, got {fmt(v)}")
