"""Integer terms for the Z3 backend: polynomials over atoms, with `%` and `\\div` normalised.

Z3 alone cannot discharge placement identities such as
``((l \\div (n*ps))*ps + l % ps) % ps = l % ps`` for symbolic n, ps: nonlinear integer
arithmetic is undecidable and its heuristics miss the uniqueness of division. We keep
integer terms as polynomials (sum of coefficient * product of atoms) and rewrite every
division by a monomial divisor d (positive constant times atoms) with identities that hold
for d > 0 and every integer dividend:

  R1  (d*A + B) \\div d = A + B \\div d          (d*A + B) % d = B % d
  R2  (x % (d*e)) % d   = x % d
  R3  (x % (d*e)) \\div d = (x \\div d) % e
  R4  (x \\div d1) \\div d2 = x \\div (d1*d2)      (d1, d2 > 0)
  R5  x \\div 1 = x,  x % 1 = 0, and constant folding

Soundness: the rewrites assume each divisor (each factor of a merged divisor, R4) is
positive where it is evaluated; the backend states exactly those positivity facts as side
conditions and proves them before it trusts a rewritten goal. Each atom `x \\div d` /
`x % d` also contributes valid lemmas (guarded by d > 0) that tie the pair together:
x = (x \\div d)*d + x % d, 0 <= x % d < d, and the small-dividend cases.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import z3

Monomial = tuple[int, ...]          # sorted atom ids, with repetition


@dataclass(slots=True)
class Atom:
    """A non-arithmetic integer term: a variable, an IF, a function application, x div/mod d."""
    id: int
    expr: z3.ArithRef
    kind: str = "opaque"             # "opaque" | "div" | "mod"
    x: "Poly | None" = None
    d: "Poly | None" = None


class Poly:
    """Sum of integer coefficient * monomial; immutable, canonical (no zero coefficients)."""
    __slots__ = ("terms", "_key")

    def __init__(self, terms: dict[Monomial, int]):
        self.terms = {m: c for m, c in terms.items() if c != 0}
        self._key = tuple(sorted(self.terms.items()))

    @staticmethod
    def const(c: int) -> "Poly":
        return Poly({(): c})

    @staticmethod
    def atom(a: Atom) -> "Poly":
        return Poly({(a.id,): 1})

    @property
    def key(self) -> tuple:
        return self._key

    def is_const(self) -> bool:
        return all(m == () for m in self.terms)

    def const_value(self) -> int:
        return self.terms.get((), 0)

    def single_atom(self) -> int | None:
        """The atom id when the polynomial is exactly one atom (coefficient 1)."""
        if len(self.terms) == 1:
            (m, c), = self.terms.items()
            if c == 1 and len(m) == 1:
                return m[0]
        return None

    def monomial(self) -> tuple[int, Monomial] | None:
        """(coefficient, monomial) when the polynomial is a single term."""
        if len(self.terms) == 1:
            (m, c), = self.terms.items()
            return c, m
        return None

    def __add__(self, o: "Poly") -> "Poly":
        t = dict(self.terms)
        for m, c in o.terms.items():
            t[m] = t.get(m, 0) + c
        return Poly(t)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, o: "Poly") -> "Poly":
        return self + (-o)

    def __mul__(self, o: "Poly") -> "Poly":
        t: dict[Monomial, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, 0) + c1 * c2
        return Poly(t)

    def __eq__(self, o) -> bool:
        return isinstance(o, Poly) and self._key == o._key

    def __hash__(self) -> int:
        return hash(self._key)


def _mono_div(m: Monomial, by: Monomial) -> Monomial | None:
    """m / by as a monomial, or None when `by` does not divide `m` (multiset inclusion)."""
    rest = list(m)
    for a in by:
        if a in rest:
            rest.remove(a)
        else:
            return None
    return tuple(rest)


def split(x: Poly, d: tuple[int, Monomial]) -> tuple[Poly, Poly]:
    """x = d*A + B, taking into A every term that d divides (coefficient floor division)."""
    k, dm = d
    a: dict[Monomial, int] = {}
    b: dict[Monomial, int] = {}
    for m, c in x.terms.items():
        q = _mono_div(m, dm)
        if q is None:
            b[m] = b.get(m, 0) + c
            continue
        a[q] = a.get(q, 0) + c // k
        if c % k:
            b[m] = b.get(m, 0) + c % k
    return Poly(a), Poly(b)


class Arith:
    """Atom table and the normalising constructors of div and mod.

    `emit_lemma(formula)` receives valid facts (each guarded by its divisor being
    positive); the backend decides where they go (hypotheses of the enclosing scope).
    """

    def __init__(self, emit_lemma: Callable[[z3.BoolRef], None], zc: z3.Context | None = None):
        self.zc = zc if zc is not None else z3.main_ctx()
        self.atoms: dict[int, Atom] = {}
        self._by_expr: dict[int, int] = {}                  # z3 ast id -> atom id
        self._divmod: dict[tuple, int] = {}                  # (kind, x.key, d.key) -> atom id
        self._lemma_cache: dict[tuple, z3.BoolRef] = {}
        self._busy: set[tuple] = set()
        self.emit_lemma = emit_lemma

    # ------------------------------------------------------------ atoms and conversion
    def opaque(self, e: z3.ArithRef) -> Poly:
        """The polynomial of a Z3 integer term, without looking inside it."""
        if z3.is_int_value(e):
            return Poly.const(e.as_long())
        aid = self._by_expr.get(e.get_id())
        if aid is None:
            aid = len(self.atoms)
            self.atoms[aid] = Atom(aid, e)
            self._by_expr[e.get_id()] = aid
        return Poly.atom(self.atoms[aid])

    def to_z3(self, p: Poly) -> z3.ArithRef:
        parts = []
        for m, c in sorted(p.terms.items()):
            factors = [self.atoms[a].expr for a in m]
            term = factors[0] if factors else None
            for f in factors[1:]:
                term = term * f
            if term is None:
                parts.append(z3.IntVal(c, self.zc))
            elif c == 1:
                parts.append(term)
            else:
                parts.append(z3.IntVal(c, self.zc) * term)
        if not parts:
            return z3.IntVal(0, self.zc)
        out = parts[0]
        for t in parts[1:]:
            out = out + t
        return out

    # ------------------------------------------------------------ div / mod
    def div(self, x: Poly, d: Poly) -> Poly:
        """x \\div d, for d > 0 (the caller proves that side condition)."""
        dm = self._monomial_divisor(d)
        if dm is None:
            return self._atom("div", x, d)
        a, b = split(x, dm)
        return a + self._div_core(b, d, dm)

    def mod(self, x: Poly, d: Poly) -> Poly:
        """x % d, for d > 0."""
        dm = self._monomial_divisor(d)
        if dm is None:
            return self._atom("mod", x, d)
        _, b = split(x, dm)
        return self._mod_core(b, d, dm)

    @staticmethod
    def _monomial_divisor(d: Poly) -> tuple[int, Monomial] | None:
        mono = d.monomial()
        if mono is None or mono[0] <= 0:
            return None
        return mono

    def _div_core(self, b: Poly, d: Poly, dm) -> Poly:
        k, m = dm
        if not b.terms:
            return Poly.const(0)
        if d == Poly.const(1):
            return b
        if b.is_const() and d.is_const():
            return Poly.const(b.const_value() // k)
        aid = b.single_atom()
        if aid is not None:
            at = self.atoms[aid]
            if at.kind == "mod":
                e = self._quotient(at.d, dm)
                if e is not None:                                   # R3
                    return self.mod(self.div(at.x, d), e)
            elif at.kind == "div":                                   # R4
                return self.div(at.x, at.d * d)
        return self._atom("div", b, d)

    def _mod_core(self, b: Poly, d: Poly, dm) -> Poly:
        k, m = dm
        if not b.terms or d == Poly.const(1):
            return Poly.const(0)
        if b.is_const() and d.is_const():
            return Poly.const(b.const_value() % k)
        aid = b.single_atom()
        if aid is not None:
            at = self.atoms[aid]
            if at.kind == "mod" and self._quotient(at.d, dm) is not None:   # R2
                return self.mod(at.x, d)
        return self._atom("mod", b, d)

    def _quotient(self, d0: Poly | None, dm) -> Poly | None:
        """d0 / d as a polynomial when the monomial d divides the monomial d0 exactly."""
        if d0 is None:
            return None
        mono = d0.monomial()
        if mono is None:
            return None
        k0, m0 = mono
        k, m = dm
        if k0 % k:
            return None
        q = _mono_div(m0, m)
        if q is None:
            return None
        return Poly({q: k0 // k})

    def _atom(self, kind: str, x: Poly, d: Poly) -> Poly:
        key = (kind, x.key, d.key)
        aid = self._divmod.get(key)
        if aid is None:
            xe, de = self.to_z3(x), self.to_z3(d)
            e = xe / de if kind == "div" else xe % de
            aid = len(self.atoms)
            self.atoms[aid] = Atom(aid, e, kind, x, d)
            self._by_expr[e.get_id()] = aid
            self._divmod[key] = aid
        self._pair_lemma(x, d)
        return Poly.atom(self.atoms[aid])

    def _pair_lemma(self, x: Poly, d: Poly) -> None:
        """Emit the valid facts about (x div d, x mod d), guarded by d > 0.

        The quotient and remainder are taken in canonical form, so a Z3 term such as
        ``(l \\div ps) % n`` is tied to the merged quotient ``l \\div (n*ps)`` (R4).
        """
        pk = (x.key, d.key)
        lemma = self._lemma_cache.get(pk)
        if lemma is None:
            if pk in self._busy:          # the partner is being built right now
                return
            self._busy.add(pk)
            try:
                q, r = self.to_z3(self.div(x, d)), self.to_z3(self.mod(x, d))
            finally:
                self._busy.discard(pk)
            xe, de = self.to_z3(x), self.to_z3(d)
            lemma = z3.Implies(de > 0, z3.And(
                xe == q * de + r, r >= 0, r < de,
                z3.Implies(z3.And(xe >= 0, xe < de), z3.And(q == 0, r == xe)),
                z3.Implies(xe >= 0, z3.And(q >= 0, q <= xe)),
                z3.Implies(xe < 0, q < 0)))
            self._lemma_cache[pk] = lemma
        self.emit_lemma(lemma)
