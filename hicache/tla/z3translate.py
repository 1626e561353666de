"""Translate TLA+ expressions (THEOREM goals) to Z3 formulas.

A theorem's goal is translated to a Z3 formula over unbounded integers and booleans:
user operators and LET definitions are inlined with their arguments substituted (bound by
name, as TLA+ defines substitution; recursion is reported as unsupported), quantifiers
over Nat, Int, a..b, set differences
and finite enumerations become Z3 quantifiers or finite expansions, and integer terms go
through hicache.tla.z3arith, which normalises `%` and `\\div`.

TLA+ leaves `x % d` and `x \\div d` unspecified unless d > 0, and `f[x]` unless
x \\in DOMAIN f. Each such use records a well-definedness side condition under the path
that reaches it (the antecedents of =>, preceding conjuncts, IF branches, bound-variable
ranges). A theorem is proved only when every side condition and then the goal are valid;
a failing side condition is reported with its location and a model, never proved around.

State variables (for inductive-invariant obligations such as `Inv /\\ Next => Inv'`) take
their type from the `v \\in S` conjuncts of TypeOK: integers, booleans, or functions over
integers (Z3 arrays Int -> Int/Bool, nested for function-valued ranges). A function
variable's domain is state too (symbolic interval bounds, or a membership array), so
nothing is assumed about it unless the theorem says so (TypeOK as a hypothesis, or an
assignment `v' = [v EXCEPT ...]`). A primed variable is an independent copy.

Anything outside this fragment raises Unsupported naming the construct and its
file:line:col.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import z3

from hicache.tla.compiler import Model, OpDef, Subst
from hicache.tla.errors import Loc, TlaError
from hicache.tla.loader import Module, node_loc
from hicache.tla.stdlib import SYNONYMS
from hicache.tla.values import fmt
from hicache.tla.z3arith import Arith, Poly

#: finite ranges up to this size are expanded instead of quantified
EXPAND_LIMIT = 16
#: names under which a module's type invariant is found
TYPE_INVARIANT_NAMES = ("TypeOK", "TypeOk", "TypeInv", "TypeInvariant")


class Unsupported(TlaError):
    kind = "unsupported"


# ====================================================================== values
@dataclass(slots=True, eq=False)
class SetV:
    """A set known by its membership predicate; `elems` when it is a finite enumeration."""
    kind: str                                   # Nat Int BOOLEAN interval enum pred
    member: Callable[[Any, "Ctx"], z3.BoolRef]     # (element, use-site context)
    lo: Poly | None = None
    hi: Poly | None = None
    elems: list | None = None
    elem_sort: str = "int"                      # "int" | "bool"
    text: str = ""
    #: the set as a Z3 array Int -> Bool when it has one (set-valued state, and unions and
    #: finite enumerations of those): equality is then array equality, quantifier-free
    arr: Any = None
    hint: Any = None                            # array sets: the TypeOK base (printing only)


@dataclass(slots=True, eq=False)
class SubsetV:
    """SUBSET B: usable on the right of \\in (and as the TypeOK set of a set-valued variable)."""
    base: SetV


@dataclass(slots=True, eq=False)
class FuncV:
    """A function: its domain and application (applied only to domain elements)."""
    domain: SetV
    app: Callable[[Any, "Ctx"], Any]               # (argument, use-site context)
    text: str = ""
    hint: "SetV | None" = None                     # state variables: the TypeOK domain (printing)


@dataclass(slots=True, eq=False)
class FnSetV:
    """[D -> R]: usable on the right of \\in only."""
    domain: SetV
    range: Any


@dataclass(slots=True, eq=False)
class TupleV:
    items: list


@dataclass(slots=True)
class VarType:
    """The shape TypeOK gives a state variable: int, bool, or a function over a set."""
    kind: str                       # "int" | "bool" | "fn" | "set" (a set of integers)
    domain: SetV | None = None
    range: "VarType | None" = None


@dataclass(slots=True, frozen=True)
class Ctx:
    env: dict                       # name -> value | ("op", params, body, Ctx, node) (call by name)
    module: Module
    scope: Any                      # compiler Scope of the module-level definitions
    path: tuple = ()                # Z3 facts that hold where we are
    bvars: tuple = ()               # Z3 bound constants in scope
    sinks: tuple = ()               # lemma lists, innermost last
    primed: bool = False
    stack: tuple = ()               # operators being inlined (recursion detection)

    def with_env(self, **kw) -> "Ctx":
        env = dict(self.env)
        env.update(kw)
        return replace(self, env=env)

    def assume(self, fact) -> "Ctx":
        return replace(self, path=self.path + (fact,))


@dataclass(slots=True)
class SideCond:
    what: str
    loc: Loc
    formula: z3.BoolRef


def _name(node) -> str:
    return type(node).__name__


# ====================================================================== translator
class Translator:
    """Translates expressions of one model (root module) to Z3."""

    def __init__(self, model: Model, constants: dict[str, Any]):
        self.m = model
        self.constants = constants           # from a .cfg: int / bool values
        self.sides: list[SideCond] = []
        self.free: dict[str, Any] = {}       # printed in counterexamples
        self._fresh = 0
        self._consts: dict[str, Any] = {}
        self._vars: dict[tuple[str, bool], Any] = {}
        self._var_sets: dict[str, Any] | None = None
        self._var_types: dict[str, VarType] = {}
        #: set by the prover when the type invariant is a hypothesis of the theorem: the
        #: unprimed function variables then have exactly its domains
        self.typed_state = False
        self._ctx_for_lemma: Ctx | None = None
        # One Z3 context per translator (per theorem): Z3's search depends on the terms
        # already in its context, so a shared context would make a theorem's outcome
        # depend on which theorems were translated before it.
        self.zc = z3.Context()
        self.arith = Arith(self._emit_lemma, self.zc)
        self.top_lemmas: list = []
        self._choices: dict = {}
        self._node_ids: dict[int, int] = {}

    # ------------------------------------------------------------ plumbing
    def fresh(self, base: str, sort: str = "int"):
        self._fresh += 1
        name = f"{base}!{self._fresh}"
        return z3.Bool(name, self.zc) if sort == "bool" else z3.Int(name, self.zc)

    def _emit_lemma(self, lemma) -> None:
        sink = self._ctx_for_lemma.sinks[-1] if self._ctx_for_lemma and self._ctx_for_lemma.sinks \
            else self.top_lemmas
        if not any(lemma.eq(x) for x in sink):
            sink.append(lemma)

    def loc(self, node, ctx: Ctx) -> Loc:
        return node_loc(ctx.module.file, node)

    def unsupported(self, what: str, node, ctx: Ctx) -> Unsupported:
        return Unsupported(what, self.loc(node, ctx))

    def side(self, what: str, cond, node, ctx: Ctx) -> None:
        """Record a well-definedness condition that must hold where `ctx` stands."""
        if z3.is_true(z3.simplify(cond)):    # e.g. a constant argument in a constant domain
            return
        lem = [x for s in ctx.sinks for x in s]
        body = z3.Implies(z3.And(*ctx.path, *lem), cond) if (ctx.path or lem) else cond
        if ctx.bvars:
            body = z3.ForAll(list(ctx.bvars), body)
        self.sides.append(SideCond(what, self.loc(node, ctx), body))

    @staticmethod
    def at_use(defn: Ctx, use: Ctx, binds: dict, fact) -> Ctx:
        """The context of a body (function value, set filter) evaluated at a use site:
        names from where it was written, path/bound variables/lemma sinks from where it
        is used, plus the fact that the argument is in its domain."""
        return replace(defn, env={**defn.env, **binds}, path=use.path + (fact,), bvars=use.bvars,
                       sinks=use.sinks)

    def bool_z3(self, v, node, ctx) -> z3.BoolRef:
        if isinstance(v, z3.BoolRef):
            return v
        raise self.unsupported(f"expected a boolean, got {self.describe(v)}", node, ctx)

    @staticmethod
    def describe(v) -> str:
        return {Poly: "an integer", SetV: "a set", FuncV: "a function", TupleV: "a tuple",
                FnSetV: "a set of functions", SubsetV: "a set of sets"}.get(
            type(v), "a boolean" if isinstance(v, z3.BoolRef) else type(v).__name__)

    # ------------------------------------------------------------ expressions
    def expr(self, node, ctx: Ctx):
        self._ctx_for_lemma = ctx
        if isinstance(node, str):
            if node == "@" and "@" in ctx.env:
                return ctx.env["@"]
            raise self.unsupported(f"token {node!r}", node, ctx)
        meth = getattr(self, "e_" + _name(node), None)
        if meth is None:
            raise self.unsupported(f"construct {_name(node)}", node, ctx)
        out = meth(node, ctx)
        self._ctx_for_lemma = ctx
        return out

    def formula(self, node, ctx: Ctx) -> z3.BoolRef:
        return self.bool_z3(self.expr(node, ctx), node, ctx)

    def e_Parentheses(self, node, ctx):
        return self.expr(node.expression, ctx)

    def e_IntegralNumeral(self, node, ctx):
        return Poly.const(int(node.value))

    def e_BooleanLiteral(self, node, ctx):
        return z3.BoolVal(node.value == "TRUE", self.zc)

    def e_SetOfBooleans(self, node, ctx):
        return SetV("BOOLEAN", lambda v, c: z3.BoolVal(True, self.zc),
                    elems=[z3.BoolVal(False, self.zc), z3.BoolVal(True, self.zc)],
                    elem_sort="bool", text="BOOLEAN")

    def e_SetOfFunctions(self, node, ctx):
        dom, rng = self.expr(node.domain, ctx), self.expr(node.codomain, ctx)
        if not isinstance(dom, SetV) or not isinstance(rng, (SetV, FnSetV, SubsetV)):
            raise self.unsupported("[D -> R] over something else than sets", node, ctx)
        return FnSetV(dom, rng)

    def e_SetSlice(self, node, ctx):
        binds = self.bounds([node.declaration], ctx)
        if len(binds) != 1 or binds[0][1] is None:
            raise self.unsupported("set filter with several bounds", node, ctx)
        name, base = binds[0]

        def member(v, c):
            inside = base.member(v, c)
            return z3.And(inside, self.formula(node.predicate, self.at_use(ctx, c, {name: v}, inside)))
        return SetV("pred", member, elem_sort=base.elem_sort, text="{x \\in S : P}")

    def e_VerticalList(self, node, ctx):
        items = [it.expression for it in node.arguments]
        op = SYNONYMS.get(node.operator, node.operator)
        return self.conj(items, ctx) if op == "/\\" else self.disj(items, ctx)

    def e_If(self, node, ctx):
        c = self.formula(node.predicate, ctx)
        a = self.expr(node.then, ctx.assume(c))
        b = self.expr(node.else_, ctx.assume(z3.Not(c)))
        return self.ite(c, a, b, node, ctx)

    def e_Cases(self, node, ctx):
        arms = []
        for item in node.cases:
            g = self.formula(item.predicate, ctx)
            arms.append((g, self.expr(item.expression, ctx.assume(g)), item))
        guards = [g for g, _, _ in arms]
        # Overlapping guards let CASE choose among their arms: oblige those arms to agree.
        for i, (gi, vi, _) in enumerate(arms):
            for gj, vj, item in arms[i + 1:]:
                self.side("overlapping CASE arms agree", z3.Implies(z3.And(gi, gj), self.eq(vi, vj, item, ctx)),
                          item, ctx)
        if node.other is not None:
            out, chain = self.expr(node.other, ctx.assume(z3.Not(z3.Or(*guards)))), arms
        else:
            self.side("some CASE guard holds", z3.Or(*guards), node, ctx)
            out, chain = arms[-1][1], arms[:-1]
        for g, v, _ in reversed(chain):
            out = self.ite(g, v, out, node, ctx)
        return out

    def e_Let(self, node, ctx):
        for d in node.definitions:
            if _name(d) != "OperatorDefinition" or d.function:
                raise self.unsupported(f"LET item {_name(d)}", d, ctx)
            params = [p.operator if hasattr(p, "operator") else str(p) for p in (d.arity or [])]
            if params:
                ctx = ctx.with_env(**{d.name: ("op", params, d.definiens, ctx, d)})
            else:   # by name, not by value: `a'` for a LET-bound `a` must prime its definition
                ctx = ctx.with_env(**{d.name: ("op", [], d.definiens, ctx, d)})
        return self.expr(node.expression, ctx)

    def e_Tuple(self, node, ctx):
        return TupleV([self.expr(i, ctx) for i in node.items])

    def e_SetEnumeration(self, node, ctx):
        elems = [self.expr(i, ctx) for i in node.items]
        sort = "bool" if elems and all(isinstance(e, z3.BoolRef) for e in elems) else \
            "int" if all(isinstance(e, Poly) for e in elems) else "other"
        return SetV("enum", lambda v, c: z3.Or(*[self.eq(v, e, node, c) for e in elems]) if elems
                    else z3.BoolVal(False, self.zc), elems=elems, elem_sort=sort, text="{...}",
                    arr=self.enum_arr(elems) if sort == "int" or not elems else None)

    def enum_arr(self, elems: list):
        """The Z3 array of a finite set of integers: stores into the empty set."""
        a = z3.K(z3.IntSort(self.zc), z3.BoolVal(False, self.zc))
        for e in elems:
            a = z3.Store(a, self.arith.to_z3(e), z3.BoolVal(True, self.zc))
        return a

    def e_SetComprehension(self, node, ctx):
        """{e : x \\in S} over a finite S: the enumeration of the images."""
        binds = self.bounds(node.declarations, ctx)
        if len(binds) != 1:
            raise self.unsupported("set map with several bounds", node, ctx)
        name, s = binds[0]
        elems = self.candidates(s)
        if elems is None:
            raise self.unsupported("set map {e : x \\in S} over a set that is not a small constant range"
                                   " or enumeration", node, ctx)
        images = [self.expr(node.item, ctx.with_env(**{name: e})) for e in elems]
        sort = "bool" if images and all(isinstance(e, z3.BoolRef) for e in images) else \
            "int" if all(isinstance(e, Poly) for e in images) else "other"
        return SetV("enum", lambda v, c: z3.Or(*[self.eq(v, e, node, c) for e in images]) if images
                    else z3.BoolVal(False, self.zc), elems=images, elem_sort=sort, text="{e : x \\in S}",
                    arr=self.enum_arr(images) if sort == "int" or not images else None)

    def e_Choose(self, node, ctx):
        """CHOOSE x \\in S : P as an uninterpreted value (a function of the bound variables in
        scope) constrained by the axiom of choice `(\\E x \\in S : P) => c \\in S /\\ P(c)`.

        The proof then holds for every value the axiom allows, TLA+'s CHOOSE among them, so
        it is sound; it is complete when P determines x (a minimum, the length of a run).
        Equal CHOOSE expressions (same node, same translated predicate, same bound
        variables) share one value, as TLA+'s CHOOSE is a function of its arguments.
        """
        decl = node.declaration
        if not (_name(decl) == "OperatorApplication" and decl.operator == "\\in" and decl.arguments
                and _name(decl.arguments[0]) == "OperatorApplication" and not decl.arguments[0].arguments):
            raise self.unsupported("CHOOSE without a bound `x \\in S`", node, ctx)
        name = decl.arguments[0].operator
        s = self.expr(decl.arguments[1], ctx)
        if not isinstance(s, SetV) or s.elem_sort not in ("int", "bool"):
            raise self.unsupported("CHOOSE over something else than a set of integers or booleans", node, ctx)
        sort = s.elem_sort
        x = self.bound_const(name, sort, node, ctx)
        xv = x if sort == "bool" else self.arith.opaque(x)
        sink: list = []
        inner = replace(ctx.with_env(**{name: xv}), bvars=ctx.bvars + (x,), sinks=ctx.sinks + (sink,))
        mem = s.member(xv, inner)
        p = self.formula(node.predicate, inner.assume(mem))
        self._ctx_for_lemma = ctx
        body = z3.And(mem, *sink, p)
        # the value depends on the bound variables in scope that the predicate mentions
        deps = _mentions(body, [b for b in ctx.bvars if not b.eq(x)])
        # keyed without the lemmas (valid facts whose presence depends on what was
        # translated before); a reuse restates the axiom where it is used
        # (by text: Z3 does not always share structurally equal quantified terms)
        key = (id(node), z3.And(mem, p).sexpr(), tuple(b.get_id() for b in deps))
        hit = self._choices.get(key)
        if hit is not None:
            self._emit_lemma(hit[1])
            return hit[0]
        self._fresh += 1
        fname = f"CHOOSE!{self._fresh}"
        if deps:
            f = z3.Function(fname, *[b.sort() for b in deps], x.sort())
            c = f(*deps)
        else:
            c = z3.Const(fname, x.sort())
        elems = self.candidates(s)
        if elems is not None:
            some = z3.Or(*[z3.substitute(body, (x, e if sort == "bool" else self.arith.to_z3(e)))
                           for e in elems]) if elems else z3.BoolVal(False, self.zc)
        else:
            some = z3.Exists([x], body)
        axiom = z3.Implies(some, z3.substitute(body, (x, c)))
        self._emit_lemma(axiom)
        out = c if sort == "bool" else self.arith.opaque(c)
        self._choices[key] = (out, axiom)
        return out

    def e_Quantification(self, node, ctx):
        binds = self.bounds(node.declarations, ctx)
        universal = node.quantifier in ("\\A", "\\forall")
        return self.quantify(universal, binds, lambda c: self.formula(node.predicate, c), node, ctx)

    def e_Function(self, node, ctx):
        binds = self.bounds(node.declaration, ctx)
        if len(binds) != 1:
            raise self.unsupported("function of several arguments", node, ctx)
        name, s = binds[0]
        fctx = ctx
        return FuncV(s, lambda v, c: self.expr(node.value, self.at_use(fctx, c, {name: v}, s.member(v, c))),
                     text="[..|->..]")

    def e_FunctionApplication(self, node, ctx):
        f = self.expr(node.function, ctx)
        if len(node.arguments) != 1:
            raise self.unsupported("function application to several arguments", node, ctx)
        x = self.expr(node.arguments[0], ctx)
        return self.apply(f, x, node, ctx)

    def e_Except(self, node, ctx):
        f = self.expr(node.function, ctx)
        for ch in node.changes:
            if _name(ch) != "FunctionChange" or any(len(k) != 1 for k in ch.item):
                raise self.unsupported("EXCEPT with a record field or several indices", ch, ctx)
            keys = [self.expr(k[0], ctx) for k in ch.item]
            f = self.update(f, keys, ch.expression, ch, ctx)
        return f

    def update(self, f, keys, rhs_node, node, ctx):
        if not isinstance(f, FuncV):
            raise self.unsupported("EXCEPT of a non-function", node, ctx)
        k = keys[0]
        old = f.app(k, ctx)
        new = (self.expr(rhs_node, ctx.with_env(**{"@": old})) if len(keys) == 1
               else self.update(old, keys[1:], rhs_node, node, ctx))
        base = f
        return FuncV(f.domain, lambda i, c: self.ite(self.eq(i, k, node, c), new, base.app(i, c), node, c),
                     text="[EXCEPT]")

    def e_OperatorApplication(self, node, ctx):
        op = SYNONYMS.get(node.operator, node.operator)
        args = node.arguments or []
        meth = _OPS.get((op, len(args)))
        if meth is not None:
            return meth(self, node, args, ctx)
        return self.apply_name(op, node, args, ctx)

    # ------------------------------------------------------------ names
    def apply_name(self, name: str, node, args, ctx: Ctx):
        if name in ctx.env:
            v = ctx.env[name]
            if isinstance(v, tuple) and v and v[0] == "op":
                _, params, body, dctx, dnode = v
                return self.inline(name, params, body, dctx, args, node, ctx, recursive_ok=not params)
            if args:
                raise self.unsupported(f"{name} is not an operator", node, ctx)
            return v
        e = ctx.scope.entries.get(name)
        if isinstance(e, OpDef):
            if e.is_instance:
                raise self.unsupported(f"instance {name}", node, ctx)
            dctx = Ctx({}, e.module, e.scope, sinks=ctx.sinks, primed=ctx.primed, stack=ctx.stack)
            if e.is_fn:
                return self.fn_def(e, node, dctx)
            return self.inline(name, [p for p, _ in e.params], e.body, dctx, args, node, ctx)
        if isinstance(e, Subst):
            raise self.unsupported(f"instance parameter {name}", node, ctx)
        if isinstance(e, tuple) and e and e[0] == "const":
            if args:
                raise self.unsupported(f"constant operator {name}", node, ctx)
            return self.constant(name, ctx)
        if isinstance(e, tuple) and e and e[0] == "var":
            return self.variable(name, ctx.primed, node, ctx)
        if name == "Nat" and not args:
            return SetV("Nat", lambda v, c: self.arith.to_z3(v) >= 0, text="Nat")
        if name == "Int" and not args:
            return SetV("Int", lambda v, c: z3.BoolVal(True, self.zc), text="Int")
        if name in ("TRUE", "FALSE") and not args:
            return z3.BoolVal(name == "TRUE", self.zc)
        if name == "BOOLEAN" and not args:
            return self.e_SetOfBooleans(node, ctx)
        raise self.unsupported(f"operator {name}" if args or e is None else f"{name}", node, ctx)

    def inline(self, name, params, body, dctx: Ctx, args, node, ctx: Ctx, recursive_ok: bool = False):
        """Substitute the arguments into the body, as TLA+ defines operator application.

        Arguments are bound by name (re-translated where used, with the use site's path
        and priming), so `x'` of a parameter x primes the argument expression.
        """
        if len(params) != len(args):
            raise self.unsupported(f"{name} takes {len(params)} arguments, given {len(args)}", node, ctx)
        if not recursive_ok and name in ctx.stack:
            raise self.unsupported(f"recursive operator {name} (inlining would not terminate)", node, ctx)
        thunks = {p: ("op", [], a, ctx, a) for p, a in zip(params, args)}
        inner = replace(dctx, env={**dctx.env, **thunks}, path=ctx.path, bvars=ctx.bvars, sinks=ctx.sinks,
                        primed=ctx.primed or dctx.primed,
                        stack=ctx.stack + (() if recursive_ok else (name,)))
        return self.expr(body, inner)

    def fn_def(self, d: OpDef, node, dctx: Ctx):
        """f[x \\in S] == e: non-recursive only (a recursive one refers to itself)."""
        fnode = d.node.function
        decls = fnode if isinstance(fnode, list) else [fnode]
        if d.name in dctx.stack:
            raise self.unsupported(f"recursive function {d.name}", node, dctx)
        inner = replace(dctx, stack=dctx.stack + (d.name,))
        binds = self.bounds(decls, inner)
        if len(binds) != 1:
            raise self.unsupported("function of several arguments", node, dctx)
        name, s = binds[0]
        return FuncV(s, lambda v, c: self.expr(d.body, self.at_use(inner, c, {name: v}, s.member(v, c))),
                     text=d.name)

    def constant(self, name: str, ctx: Ctx):
        if name in self.constants:
            v = self.constants[name]
            if isinstance(v, bool):
                return z3.BoolVal(v, self.zc)
            if isinstance(v, int):
                return Poly.const(v)
            raise Unsupported(f"constant {name} = {fmt(v)} (only integers and booleans)", None)
        if name not in self._consts:
            sort = "bool" if name in self.m_bool_constants() else "int"
            c = z3.Bool(name, self.zc) if sort == "bool" else z3.Int(name, self.zc)
            self.free[name] = c
            self._consts[name] = c if sort == "bool" else self.arith.opaque(c)
        return self._consts[name]

    def m_bool_constants(self) -> set[str]:
        """Constants some ASSUME types as `C \\in BOOLEAN`."""
        out = set()
        for expr, _ in self.m.assumes:
            for conj in _conjuncts(expr):
                if _name(conj) == "OperatorApplication" and conj.operator == "\\in" and \
                        _name(conj.arguments[1]) == "SetOfBooleans" and \
                        _name(conj.arguments[0]) == "OperatorApplication":
                    out.add(conj.arguments[0].operator)
        return out

    # ------------------------------------------------------------ state variables
    def type_def(self) -> OpDef | None:
        """The module's type invariant (TypeOK or a usual synonym), if any."""
        for tname in TYPE_INVARIANT_NAMES:
            d = self.m.root_scope.entries.get(tname)
            if isinstance(d, OpDef) and not d.params:
                return d
        return None

    def asserts_type_invariant(self, node, ctx: Ctx, seen: frozenset = frozenset()) -> bool:
        """Whether `node`, as a conjunction, has the type invariant (unprimed) as a conjunct,
        looking through zero-argument definitions (Inv == TypeOK /\\ ...)."""
        k = _name(node)
        if k == "Parentheses":
            return self.asserts_type_invariant(node.expression, ctx, seen)
        if k == "VerticalList" and SYNONYMS.get(node.operator, node.operator) == "/\\":
            return any(self.asserts_type_invariant(it.expression, ctx, seen) for it in node.arguments)
        if k != "OperatorApplication":
            return False
        op = SYNONYMS.get(node.operator, node.operator)
        if op == "/\\":
            return any(self.asserts_type_invariant(a, ctx, seen) for a in node.arguments)
        if node.arguments or op in ctx.env or op in seen:
            return False
        d = ctx.scope.entries.get(op)
        if not isinstance(d, OpDef) or d.params or d.is_fn or d.is_instance:
            return False
        if d is self.type_def():
            return True
        return self.asserts_type_invariant(d.body, Ctx({}, d.module, d.scope), seen | {op})

    def var_sets(self) -> dict[str, Any]:
        """name -> the S of a `name \\in S` conjunct of TypeOK (or TypeInv...)."""
        if self._var_sets is None:
            self._var_sets = {}
            d = self.type_def()
            for conj in _conjuncts(d.body) if d is not None else []:
                if _name(conj) == "OperatorApplication" and conj.operator == "\\in" and \
                        _name(conj.arguments[0]) == "OperatorApplication" and not conj.arguments[0].arguments:
                    self._var_sets.setdefault(conj.arguments[0].operator, (conj.arguments[1], d))
        return self._var_sets

    def variable(self, name: str, primed: bool, node, ctx: Ctx):
        key = (name, primed)
        if key in self._vars:
            return self._vars[key]
        t = self._var_types.get(name)
        if t is None:
            entry = self.var_sets().get(name)
            if entry is None:
                raise self.unsupported(f"state variable {name} has no `{name} \\in S` conjunct in TypeOK",
                                       node, ctx)
            set_node, d = entry
            tctx = Ctx({}, d.module, d.scope)
            t = self._type_of(self.expr(set_node, tctx), name, set_node, tctx)
            self._var_types[name] = t
        label = name + ("'" if primed else "")
        v = self._make_var(label, t, typed=self.typed_state and not primed)
        self._vars[key] = v
        return v

    def _type_of(self, s, name: str, node, ctx: Ctx) -> VarType:
        """Integers, booleans, or [D -> R] with D a set of integers; anything else is unsupported."""
        if isinstance(s, SetV) and s.elem_sort in ("int", "bool"):
            return VarType(s.elem_sort)
        if isinstance(s, SubsetV):
            return VarType("set", s.base)
        if isinstance(s, FnSetV) and s.domain.elem_sort == "int":
            return VarType("fn", s.domain, self._type_of(s.range, name, node, ctx))
        raise self.unsupported(f"the TypeOK set of state variable {name} (only sets of integers or booleans,"
                               " and [D -> R] over integer D)", node, ctx)

    def _make_var(self, label: str, t: VarType, typed: bool = False):
        if t.kind == "int":
            c = z3.Int(label, self.zc)
            self.free[label] = c
            return self.arith.opaque(c)
        if t.kind == "bool":
            c = z3.Bool(label, self.zc)
            self.free[label] = c
            return c
        if t.kind == "set":
            a = z3.Array(label, z3.IntSort(self.zc), z3.BoolSort(self.zc))
            v = self.array_set(a, t.domain)
            self.free[label] = v
            return v
        # A function variable's domain is part of the state, not taken for granted: TypeOK
        # (when it is a hypothesis) fixes it, an assignment `v' = g` carries DOMAIN g.
        # Level k of a nested function has its domain indexed by the k outer arguments.
        arr = z3.Array(label, z3.IntSort(self.zc), _z3_sort(t.range, self.zc))
        doms, level, sort_depth = [], t, 0
        while level.kind == "fn" and typed:     # TypeOK is a hypothesis: its domains hold
            doms.append(("typed", level.domain))
            level, sort_depth = level.range, sort_depth + 1
        while level.kind == "fn":
            tag = f"{label}.dom{sort_depth}" if sort_depth else f"DOMAIN {label}"
            if level.domain.kind == "interval":
                lo = z3.Const(tag + ".lo", _nested_sort(z3.IntSort(self.zc), sort_depth, self.zc))
                hi = z3.Const(tag + ".hi", _nested_sort(z3.IntSort(self.zc), sort_depth, self.zc))
                doms.append(("interval", lo, hi))
            else:
                mem = z3.Const(tag, _nested_sort(z3.ArraySort(z3.IntSort(self.zc), z3.BoolSort(self.zc)),
                                                 sort_depth, self.zc))
                doms.append(("pred", mem))
            level, sort_depth = level.range, sort_depth + 1
        f = self._array_fn(arr, t, doms)
        self.free[label] = f
        return f

    def array_set(self, a, hint: SetV | None) -> SetV:
        """A set of integers held in the Z3 array `a` (Int -> Bool); `hint` (the TypeOK base)
        only lists the candidates a counterexample prints."""
        return SetV("array", lambda v, c: z3.Select(a, self.arith.to_z3(v)), text=f"{a}", arr=a, hint=hint)

    def _array_fn(self, arr, t: VarType, doms: list) -> FuncV:
        """The function held in `arr`; doms[0] is its domain, doms[1:] those of its values."""
        rt = t.range
        kind, *parts = doms[0]
        if kind == "typed":
            dom = parts[0]
        elif kind == "interval":
            lo, hi = (self.arith.opaque(p) for p in parts)
            z = self.arith.to_z3
            dom = SetV("interval", lambda v, c: z3.And(z(lo) <= z(v), z(v) <= z(hi)), lo=lo, hi=hi,
                       text=f"DOMAIN {arr}")
        else:
            mem = parts[0]
            dom = SetV("pred", lambda v, c: z3.Select(mem, self.arith.to_z3(v)), text=f"DOMAIN {arr}")

        def app(i, c):
            iz = self.arith.to_z3(i)
            x = z3.Select(arr, iz)
            if rt.kind == "int":
                return self.arith.opaque(x)
            if rt.kind == "bool":
                return x
            if rt.kind == "set":
                return self.array_set(x, rt.domain)
            return self._array_fn(x, rt, [(k, *ps) if k == "typed" else (k, *[z3.Select(p, iz) for p in ps])
                                          for k, *ps in doms[1:]])
        f = FuncV(dom, app, text=str(arr))
        f.hint = t.domain
        return f

    # ------------------------------------------------------------ logic
    def conj(self, items, ctx):
        out = []
        for it in items:
            f = self.formula(it, ctx)
            out.append(f)
            ctx = ctx.assume(f)
        return z3.And(*out) if len(out) != 1 else out[0]

    def disj(self, items, ctx):
        out = []
        for it in items:
            f = self.formula(it, ctx)
            out.append(f)
            ctx = ctx.assume(z3.Not(f))
        return z3.Or(*out) if len(out) != 1 else out[0]

    def bounds(self, decls, ctx: Ctx) -> list[tuple[str, SetV | None]]:
        """[(name, set or None)] from `x, y \\in S, z \\in T` / `x, y` declarations."""
        out, pending = [], []
        for d in decls:
            if _name(d) == "OperatorApplication" and d.operator == "\\in" and d.arguments:
                target = d.arguments[0]
                if _name(target) == "Tuple":
                    raise self.unsupported("tuple pattern in a bound", d, ctx)
                s = self.expr(d.arguments[1], ctx)
                if not isinstance(s, SetV):
                    raise self.unsupported(f"bound over {self.describe(s)}", d, ctx)
                for n in pending + [target.operator]:
                    out.append((n, s))
                pending = []
            elif _name(d) == "OperatorApplication" and not d.arguments:
                pending.append(d.operator)
            else:
                raise self.unsupported(f"bound declaration {_name(d)}", d, ctx)
        out += [(n, None) for n in pending]
        return out

    def candidates(self, s: SetV | None):
        """Finite list of elements to expand over, or None to quantify symbolically."""
        if s is None:
            return None
        if s.elems is not None:
            return s.elems
        if s.kind == "interval" and s.lo.is_const() and s.hi.is_const():
            lo, hi = s.lo.const_value(), s.hi.const_value()
            if hi - lo + 1 <= EXPAND_LIMIT:
                return [Poly.const(i) for i in range(lo, hi + 1)]
        return None

    def bound_sort(self, s: SetV | None, node, ctx: Ctx) -> str:
        """Z3 sort of a variable ranging over `s` symbolically: integers or booleans only."""
        if s is None:
            return "int"
        if s.elem_sort not in ("int", "bool"):
            raise self.unsupported("a bound ranging over a set of tuples/sets/functions", node, ctx)
        return s.elem_sort

    def quantify(self, universal: bool, binds, body: Callable[[Ctx], z3.BoolRef], node, ctx: Ctx):
        if not binds:
            return body(ctx)
        (name, s), rest = binds[0], binds[1:]
        elems = self.candidates(s)
        if elems is not None:
            parts = []
            for e in elems:
                parts.append(self.quantify(universal, rest, body, node, ctx.with_env(**{name: e})))
            return (z3.And(*parts) if universal else z3.Or(*parts)) if parts else z3.BoolVal(universal, self.zc)
        sort = self.bound_sort(s, node, ctx)
        x = self.bound_const(name, sort, node, ctx)
        val = x if sort == "bool" else self.arith.opaque(x)
        sink: list = []
        inner = replace(ctx.with_env(**{name: val}), bvars=ctx.bvars + (x,), sinks=ctx.sinks + (sink,))
        mem = s.member(val, inner) if s is not None else z3.BoolVal(True, self.zc)
        inner = inner.assume(mem)
        b = self.quantify(universal, rest, body, node, inner)
        self._ctx_for_lemma = ctx
        hyp = z3.And(mem, *sink)
        return z3.ForAll([x], z3.Implies(hyp, b)) if universal else z3.Exists([x], z3.And(hyp, b))

    def bound_const(self, name: str, sort: str, node, ctx: Ctx):
        """The Z3 constant of a bound variable, named after its binder (not a counter), so
        that translating the same expression twice gives the same Z3 term (CHOOSE values
        are shared by that). A binder already in scope (the same node nested in itself
        through operator arguments) gets another name, so nothing is captured."""
        base = f"{name}!{self.node_id(node)}."
        k = sum(1 for b in ctx.bvars if str(b).startswith(base))
        label = f"{base}{k}"
        return z3.Bool(label, self.zc) if sort == "bool" else z3.Int(label, self.zc)

    def node_id(self, node) -> int:
        """A number per syntax node, in order of first translation (deterministic)."""
        return self._node_ids.setdefault(id(node), len(self._node_ids))

    def ite(self, c, a, b, node, ctx):
        if isinstance(a, Poly) and isinstance(b, Poly):
            return self.arith.opaque(z3.If(c, self.arith.to_z3(a), self.arith.to_z3(b)))
        if isinstance(a, z3.BoolRef) and isinstance(b, z3.BoolRef):
            return z3.If(c, a, b)
        if isinstance(a, SetV) and isinstance(b, SetV) and a.elem_sort == b.elem_sort:
            if a is b:
                return a
            out = self.ite_set(c, a, b)
            if a.arr is not None and b.arr is not None:
                out.arr = z3.If(c, a.arr, b.arr)
            return out
        if isinstance(a, FuncV) and isinstance(b, FuncV) and a.domain.elem_sort == b.domain.elem_sort:
            return FuncV(self.ite_set(c, a.domain, b.domain),
                         lambda i, u: self.ite(c, a.app(i, u), b.app(i, u), node, u), text="IF")
        raise self.unsupported(f"IF/CASE choosing between {self.describe(a)} and {self.describe(b)}"
                               " (only integers, booleans, functions over integers)", node, ctx)

    def ite_set(self, c, a: SetV, b: SetV) -> SetV:
        """IF c THEN a ELSE b for the domains of two functions (same element sort)."""
        if a is b:
            return a
        if a.kind == "interval" and b.kind == "interval":
            z = self.arith.to_z3
            lo = self.arith.opaque(z3.If(c, z(a.lo), z(b.lo)))
            hi = self.arith.opaque(z3.If(c, z(a.hi), z(b.hi)))
            return SetV("interval", lambda v, u: z3.And(z(lo) <= z(v), z(v) <= z(hi)), lo=lo, hi=hi,
                        text="IF-domain")
        return SetV("pred", lambda v, u: z3.If(c, a.member(v, u), b.member(v, u)), elem_sort=a.elem_sort,
                    text="IF-domain")

    def apply(self, f, x, node, ctx):
        if not isinstance(f, FuncV):
            raise self.unsupported(f"application of {self.describe(f)}", node, ctx)
        inside = f.domain.member(x, ctx)
        self.side("argument in DOMAIN of the function", inside, node, ctx)
        return f.app(x, ctx.assume(inside))

    def eq(self, a, b, node, ctx) -> z3.BoolRef:
        if isinstance(a, Poly) and isinstance(b, Poly):
            return self.arith.to_z3(a) == self.arith.to_z3(b)
        if isinstance(a, z3.BoolRef) and isinstance(b, z3.BoolRef):
            return a == b
        if isinstance(a, TupleV) and isinstance(b, TupleV):
            if len(a.items) != len(b.items):
                return z3.BoolVal(False, self.zc)
            return z3.And(*[self.eq(x, y, node, ctx) for x, y in zip(a.items, b.items)], self.zc)
        if isinstance(a, SetV) and isinstance(b, SetV):
            return self.set_eq(a, b, node, ctx)
        if isinstance(a, FuncV) and isinstance(b, FuncV):
            same = self.set_eq(a.domain, b.domain, node, ctx)
            # equal domains: quantifying over either is the same; prefer one we can expand
            over = b.domain if self.candidates(a.domain) is None and self.candidates(b.domain) is not None \
                else a.domain
            pointwise = self.quantify(True, [("dom", over)],
                                      lambda c: self.eq(a.app(c.env["dom"], c), b.app(c.env["dom"], c), node, c),
                                      node, ctx)
            return z3.And(same, pointwise)
        raise self.unsupported(f"comparing {self.describe(a)} with {self.describe(b)}", node, ctx)

    def set_eq(self, a: SetV, b: SetV, node, ctx) -> z3.BoolRef:
        if a is b:
            return z3.BoolVal(True, self.zc)
        if a.elem_sort != b.elem_sort:
            return z3.BoolVal(False, self.zc)
        if a.arr is not None and b.arr is not None:
            return a.arr == b.arr
        if a.kind == "interval" and b.kind == "interval":
            alo, ahi, blo, bhi = (self.arith.to_z3(p) for p in (a.lo, a.hi, b.lo, b.hi))
            return z3.Or(z3.And(alo > ahi, blo > bhi), z3.And(alo == blo, ahi == bhi))
        if a.elems is not None and b.elems is not None:
            return z3.And(*[b.member(e, ctx) for e in a.elems], *[a.member(e, ctx) for e in b.elems], self.zc)
        if a.elem_sort == "bool":
            vals = [z3.BoolVal(False, self.zc), z3.BoolVal(True, self.zc)]
            return z3.And(*[a.member(v, ctx) == b.member(v, ctx) for v in vals])
        return self.quantify(True, [("elem", None)],
                             lambda c: a.member(c.env["elem"], c) == b.member(c.env["elem"], c), node, ctx)

    # ------------------------------------------------------------ sets
    def interval(self, node, args, ctx):
        lo, hi = (self.expr(a, ctx) for a in args)
        if not (isinstance(lo, Poly) and isinstance(hi, Poly)):
            raise self.unsupported("a..b over non-integers", node, ctx)
        z = self.arith.to_z3
        return SetV("interval", lambda v, c: z3.And(z(lo) <= z(v), z(v) <= z(hi)), lo=lo, hi=hi, text="a..b")

    def membership(self, x, s, node, ctx) -> z3.BoolRef:
        if isinstance(s, SubsetV):
            if not isinstance(x, SetV):
                return z3.BoolVal(False, self.zc)
            return self.quantify(True, [("elem", x)], lambda c: s.base.member(c.env["elem"], c), node, ctx)
        if isinstance(s, SetV):
            if s.kind == "BOOLEAN":
                return z3.BoolVal(isinstance(x, z3.BoolRef), self.zc)
            if s.elem_sort == "bool":
                return s.member(x, ctx) if isinstance(x, z3.BoolRef) else z3.BoolVal(False, self.zc)
            if not isinstance(x, Poly):
                if s.kind == "enum":
                    return s.member(x, ctx)
                raise self.unsupported(f"{self.describe(x)} \\in a set of integers", node, ctx)
            return s.member(x, ctx)
        if isinstance(s, FnSetV):
            dom, rng = s.domain, s.range
            if not isinstance(x, FuncV):
                return z3.BoolVal(False, self.zc)
            same = self.set_eq(x.domain, dom, node, ctx)
            inrange = self.quantify(True, [("dom", dom)],
                                    lambda c: self.membership(x.app(c.env["dom"], c), rng, node, c), node, ctx)
            return z3.And(same, inrange)
        raise self.unsupported(f"membership in {self.describe(s)}", node, ctx)


def _union(a: SetV, b: SetV) -> SetV:
    return SetV("pred", lambda v, c: z3.Or(a.member(v, c), b.member(v, c)), elem_sort=a.elem_sort,
                elems=(a.elems + b.elems) if a.elems is not None and b.elems is not None else None,
                arr=z3.SetUnion(a.arr, b.arr) if a.arr is not None and b.arr is not None else None)


def _mentions(e, consts: list) -> list:
    """Those of `consts` that occur in the Z3 term `e`."""
    want = {c.get_id(): c for c in consts}
    if not want:
        return []
    found, seen, todo = set(), set(), [e]
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if t.get_id() in want:
            found.add(t.get_id())
        if z3.is_quantifier(t):
            todo.append(t.body())
        else:
            todo.extend(t.children())
    return [c for c in consts if c.get_id() in found]


def _conjuncts(node) -> list:
    k = _name(node)
    if k == "Parentheses":
        return _conjuncts(node.expression)
    if k == "VerticalList" and SYNONYMS.get(node.operator, node.operator) == "/\\":
        return [c for it in node.arguments for c in _conjuncts(it.expression)]
    if k == "OperatorApplication" and SYNONYMS.get(node.operator, node.operator) == "/\\":
        return [c for a in node.arguments for c in _conjuncts(a)]
    return [node]


def _nested_sort(base, depth: int, zc: z3.Context):
    """Array(Int, ... Array(Int, base)) with `depth` index levels."""
    for _ in range(depth):
        base = z3.ArraySort(z3.IntSort(zc), base)
    return base


def _z3_sort(t: VarType, zc: z3.Context):
    if t.kind == "int":
        return z3.IntSort(zc)
    if t.kind == "bool":
        return z3.BoolSort(zc)
    if t.kind == "set":
        return z3.ArraySort(z3.IntSort(zc), z3.BoolSort(zc))
    return z3.ArraySort(z3.IntSort(zc), _z3_sort(t.range, zc))


# ------------------------------------------------------------ built-in operators
def _int2(fn):
    def op(tr: Translator, node, args, ctx):
        a, b = (tr.expr(x, ctx) for x in args)
        if not (isinstance(a, Poly) and isinstance(b, Poly)):
            raise tr.unsupported(f"{node.operator} on {tr.describe(a)} and {tr.describe(b)}", node, ctx)
        return fn(tr, a, b, node, ctx)
    return op


def _cmp(fn):
    def op(tr: Translator, a, b, node, ctx):
        return fn(tr.arith.to_z3(a), tr.arith.to_z3(b))
    return _int2(op)


def _divmod(kind):
    def op(tr: Translator, a, b, node, ctx):
        # The normal form splits a merged divisor into its factors (R4), so each atom factor
        # of a monomial divisor must be positive too: oblige exactly that (conservative).
        conds = [tr.arith.to_z3(b) > 0]
        mono = b.monomial()
        if mono is not None and mono[0] > 0:
            conds += [tr.arith.atoms[a_].expr > 0 for a_ in sorted(set(mono[1]))]
        tr.side(f"divisor of {node.operator} is positive", z3.And(*conds), node, ctx)
        return tr.arith.div(a, b) if kind == "div" else tr.arith.mod(a, b)
    return _int2(op)


def _power(tr, a, b, node, ctx):
    if not b.is_const() or b.const_value() < 0:
        raise tr.unsupported("^ with a non-constant or negative exponent", node, ctx)
    out = Poly.const(1)
    for _ in range(b.const_value()):
        out = out * a
    return out


def _and(tr, node, args, ctx):
    return tr.conj(args, ctx)


def _or(tr, node, args, ctx):
    return tr.disj(args, ctx)


def _implies(tr, node, args, ctx):
    a = tr.formula(args[0], ctx)
    return z3.Implies(a, tr.formula(args[1], ctx.assume(a)))


def _equiv(tr, node, args, ctx):
    return tr.formula(args[0], ctx) == tr.formula(args[1], ctx)


def _not(tr, node, args, ctx):
    return z3.Not(tr.formula(args[0], ctx))


def _eq(tr, node, args, ctx):
    a, b = (tr.expr(x, ctx) for x in args)
    return tr.eq(a, b, node, ctx)


def _neq(tr, node, args, ctx):
    a, b = (tr.expr(x, ctx) for x in args)
    return z3.Not(tr.eq(a, b, node, ctx))


def _in(tr, node, args, ctx):
    return tr.membership(tr.expr(args[0], ctx), tr.expr(args[1], ctx), node, ctx)


def _notin(tr, node, args, ctx):
    return z3.Not(_in(tr, node, args, ctx))


def _setminus(tr, node, args, ctx):
    a, b = (tr.expr(x, ctx) for x in args)
    if not (isinstance(a, SetV) and isinstance(b, SetV)):
        raise tr.unsupported("\\ on non-sets", node, ctx)
    return SetV("pred", lambda v, c: z3.And(a.member(v, c), z3.Not(b.member(v, c))), elem_sort=a.elem_sort,
                text="S \\ T")


def _setop(kind):
    def op(tr, node, args, ctx):
        a, b = (tr.expr(x, ctx) for x in args)
        if not (isinstance(a, SetV) and isinstance(b, SetV)):
            raise tr.unsupported(f"{node.operator} on non-sets", node, ctx)
        if kind == "cup":
            return _union(a, b)
        return SetV("pred", lambda v, c: z3.And(a.member(v, c), b.member(v, c)), elem_sort=a.elem_sort)
    return op


def _subseteq(tr, node, args, ctx):
    a, b = (tr.expr(x, ctx) for x in args)
    if not (isinstance(a, SetV) and isinstance(b, SetV)):
        raise tr.unsupported("\\subseteq on non-sets", node, ctx)
    return tr.quantify(True, [("elem", a)], lambda c: b.member(c.env["elem"], c), node, ctx)


def _prime(tr, node, args, ctx):
    if ctx.primed:
        raise tr.unsupported("double prime", node, ctx)
    return tr.expr(args[0], replace(ctx, primed=True))


def _unchanged(tr, node, args, ctx):
    if ctx.primed:
        raise tr.unsupported("UNCHANGED inside a primed expression", node, ctx)
    now = tr.expr(args[0], ctx)
    nxt = tr.expr(args[0], replace(ctx, primed=True))
    return tr.eq(nxt, now, node, ctx)


def _domain(tr, node, args, ctx):
    f = tr.expr(args[0], ctx)
    if not isinstance(f, FuncV):
        raise tr.unsupported(f"DOMAIN of {tr.describe(f)}", node, ctx)
    return f.domain


def _subset(tr, node, args, ctx):
    b = tr.expr(args[0], ctx)
    if not isinstance(b, SetV) or b.elem_sort != "int":
        raise tr.unsupported("SUBSET of something else than a set of integers", node, ctx)
    return SubsetV(b)


def _neg(tr, node, args, ctx):
    a = tr.expr(args[0], ctx)
    if not isinstance(a, Poly):
        raise tr.unsupported(f"unary minus of {tr.describe(a)}", node, ctx)
    return -a


_OPS: dict[tuple[str, int], Callable] = {
    ("+", 2): _int2(lambda tr, a, b, n, c: a + b),
    ("-", 2): _int2(lambda tr, a, b, n, c: a - b),
    ("*", 2): _int2(lambda tr, a, b, n, c: a * b),
    ("^", 2): _int2(_power),
    ("%", 2): _divmod("mod"),
    ("\\div", 2): _divmod("div"),
    ("-", 1): _neg, ("-.", 1): _neg,
    ("<", 2): _cmp(lambda a, b: a < b), ("<=", 2): _cmp(lambda a, b: a <= b),
    (">", 2): _cmp(lambda a, b: a > b), (">=", 2): _cmp(lambda a, b: a >= b),
    ("..", 2): lambda tr, node, args, ctx: tr.interval(node, args, ctx),
    ("/\\", 2): _and, ("\\/", 2): _or, ("~", 1): _not, ("=>", 2): _implies, ("<=>", 2): _equiv,
    ("=", 2): _eq, ("#", 2): _neq, ("\\in", 2): _in, ("\\notin", 2): _notin,
    ("\\", 2): _setminus, ("\\cup", 2): _setop("cup"), ("\\cap", 2): _setop("cap"),
    ("\\subseteq", 2): _subseteq,
    ("SUBSET", 1): _subset,
    ("'", 1): _prime, ("UNCHANGED", 1): _unchanged, ("DOMAIN", 1): _domain,
}
