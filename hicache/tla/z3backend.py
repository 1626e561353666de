"""Discharge TLA+ THEOREMs with Z3.

A theorem's goal is translated to a Z3 formula over unbounded integers and booleans:
user operators and LET definitions are inlined by substituting translated arguments
(recursion is reported as unsupported), quantifiers over Nat, Int, a..b, set differences
and finite enumerations become Z3 quantifiers or finite expansions, and integer terms go
through hicache.tla.z3arith, which normalises `%` and `\\div`.

TLA+ leaves `x % d` and `x \\div d` unspecified unless d > 0, and `f[x]` unless
x \\in DOMAIN f. Each such use records a well-definedness side condition under the path
that reaches it (the antecedents of =>, preceding conjuncts, IF branches, bound-variable
ranges). A theorem is proved only when every side condition and then the goal are valid;
a failing side condition is reported with its location and a model, never proved around.

State variables (for inductive-invariant obligations such as `Inv /\\ Next => Inv'`) take
their type from the `v \\in S` conjuncts of TypeOK: integers, booleans, or functions over
a set (Z3 arrays Int -> Int/Bool, nested for function-valued ranges). A primed variable
is an independent copy. An assignment `v' = g` additionally obliges DOMAIN g to equal the
TypeOK domain of v, so an action cannot drop out of the proof by changing a domain.

Result of each theorem: proved, counterexample (with a model), unknown (timeout or Z3
gave up), or unsupported (the construct and its file:line:col).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Callable

import z3

from hicache.tla.compiler import Model, OpDef, Subst
from hicache.tla.errors import Loc, TlaError
from hicache.tla.loader import Loader, Module, node_loc
from hicache.tla.stdlib import SYNONYMS
from hicache.tla.z3arith import Arith, Poly

#: seconds per theorem unless the caller says otherwise
DEFAULT_TIMEOUT_S = 30.0
#: finite ranges up to this size are expanded instead of quantified
EXPAND_LIMIT = 16


class Status(str, Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"
    UNSUPPORTED = "unsupported"
    ERROR = "error"


@dataclass(slots=True)
class TheoremResult:
    name: str
    module: str
    status: Status
    seconds: float
    detail: str
    location: str = ""

    @property
    def proved(self) -> bool:
        return self.status is Status.PROVED

    def as_json(self) -> dict:
        return {"name": self.name, "module": self.module, "proved": self.proved,
                "seconds": round(self.seconds, 4), "status": self.status.value,
                "detail": self.detail, "location": self.location}


class Unsupported(TlaError):
    kind = "unsupported"


# ====================================================================== values
@dataclass(slots=True, eq=False)
class SetV:
    """A set known by its membership predicate; `elems` when it is a finite enumeration."""
    kind: str                                   # Nat Int BOOLEAN interval enum pred
    member: Callable[[Any], z3.BoolRef]
    lo: Poly | None = None
    hi: Poly | None = None
    elems: list | None = None
    elem_sort: str = "int"                      # "int" | "bool"
    text: str = ""


@dataclass(slots=True, eq=False)
class FuncV:
    """A function: its domain and application (applied only to domain elements)."""
    domain: SetV
    app: Callable[[Any], Any]
    text: str = ""


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
    """The shape TypeOK gives a state variable: int, bool, or a function of VarType."""
    kind: str                       # "int" | "bool" | "fn"
    domain_node: Any = None
    range: "VarType | None" = None
    range_node: Any = None


@dataclass(slots=True, frozen=True)
class Ctx:
    env: dict                       # name -> value | ("op", params, body, Ctx) for LET operators
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
        self._var_types: dict[str, VarType] | None = None
        self._var_domains: dict[int, SetV] = {}
        self._ctx_for_lemma: Ctx | None = None
        self.arith = Arith(self._emit_lemma)
        self.top_lemmas: list = []

    # ------------------------------------------------------------ plumbing
    def fresh(self, base: str, sort: str = "int"):
        self._fresh += 1
        name = f"{base}!{self._fresh}"
        return z3.Bool(name) if sort == "bool" else z3.Int(name)

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
        lem = [x for s in ctx.sinks for x in s]
        body = z3.Implies(z3.And(*ctx.path, *lem), cond) if (ctx.path or lem) else cond
        if ctx.bvars:
            body = z3.ForAll(list(ctx.bvars), body)
        self.sides.append(SideCond(what, self.loc(node, ctx), body))

    def int_z3(self, v, node, ctx) -> z3.ArithRef:
        if isinstance(v, Poly):
            return self.arith.to_z3(v)
        raise self.unsupported(f"expected an integer, got {self.describe(v)}", node, ctx)

    def bool_z3(self, v, node, ctx) -> z3.BoolRef:
        if isinstance(v, z3.BoolRef):
            return v
        raise self.unsupported(f"expected a boolean, got {self.describe(v)}", node, ctx)

    @staticmethod
    def describe(v) -> str:
        return {Poly: "an integer", SetV: "a set", FuncV: "a function", TupleV: "a tuple",
                FnSetV: "a set of functions"}.get(
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
        return z3.BoolVal(node.value == "TRUE")

    def e_SetOfBooleans(self, node, ctx):
        return SetV("BOOLEAN", lambda v: z3.BoolVal(True), elems=[z3.BoolVal(False), z3.BoolVal(True)],
                    elem_sort="bool", text="BOOLEAN")

    def e_SetOfFunctions(self, node, ctx):
        dom, rng = self.expr(node.domain, ctx), self.expr(node.codomain, ctx)
        if not isinstance(dom, SetV) or not isinstance(rng, (SetV, FnSetV)):
            raise self.unsupported("[D -> R] over something else than sets", node, ctx)
        return FnSetV(dom, rng)

    def e_SetSlice(self, node, ctx):
        binds = self.bounds([node.declaration], ctx)
        if len(binds) != 1 or binds[0][1] is None:
            raise self.unsupported("set filter with several bounds", node, ctx)
        name, base = binds[0]
        return SetV("pred", lambda v: z3.And(base.member(v), self.formula(node.predicate, ctx.with_env(**{name: v}))),
                    elem_sort=base.elem_sort, text="{x \\in S : P}")

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
        arms, guards, seen = [], [], []
        for item in node.cases:
            g = self.formula(item.predicate, ctx)
            arms.append((g, self.expr(item.expression, ctx.assume(g)), item))
            guards.append(g)
        if node.other is not None:
            out = self.expr(node.other, ctx.assume(z3.Not(z3.Or(*guards))))
        else:
            self.side("some CASE guard holds", z3.Or(*guards), node, ctx)
            out = arms[-1][1]
            arms = arms[:-1]
        # Overlapping guards make CASE choose arbitrarily among them: oblige the arms to agree.
        for i, (gi, vi, _) in enumerate(arms + ([] if node.other is not None else [])):
            for gj, vj, item in arms[i + 1:]:
                self.side("overlapping CASE arms agree", z3.Implies(z3.And(gi, gj), self.eq(vi, vj, item, ctx)),
                          item, ctx)
        for g, v, _ in reversed(arms):
            out = self.ite(g, v, out, node, ctx)
        return out

    def e_Let(self, node, ctx):
        for d in node.definitions:
            if _name(d) != "OperatorDefinition" or d.function:
                raise self.unsupported(f"LET item {_name(d)}", d, ctx)
            params = [p.operator if hasattr(p, "operator") else str(p) for p in (d.arity or [])]
            if params:
                ctx = ctx.with_env(**{d.name: ("op", params, d.definiens, ctx, d)})
            else:
                ctx = ctx.with_env(**{d.name: self.expr(d.definiens, ctx)})
        return self.expr(node.expression, ctx)

    def e_Tuple(self, node, ctx):
        return TupleV([self.expr(i, ctx) for i in node.items])

    def e_SetEnumeration(self, node, ctx):
        elems = [self.expr(i, ctx) for i in node.items]
        sort = "bool" if elems and all(isinstance(e, z3.BoolRef) for e in elems) else "int"
        return SetV("enum", lambda v: z3.Or(*[self.eq(v, e, node, ctx) for e in elems]) if elems
                    else z3.BoolVal(False), elems=elems, elem_sort=sort, text="{...}")

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
        return FuncV(s, lambda v: self.expr(node.value, fctx.with_env(**{name: v})), text="[..|->..]")

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
        old = f.app(k)
        new = (self.expr(rhs_node, ctx.with_env(**{"@": old})) if len(keys) == 1
               else self.update(old, keys[1:], rhs_node, node, ctx))
        base = f
        return FuncV(f.domain, lambda i: self.ite(self.eq(i, k, node, ctx), new, base.app(i), node, ctx),
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
                return self.inline(name, params, body, dctx, args, node, ctx)
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
            return SetV("Nat", lambda v: self.arith.to_z3(v) >= 0, text="Nat")
        if name == "Int" and not args:
            return SetV("Int", lambda v: z3.BoolVal(True), text="Int")
        if name in ("TRUE", "FALSE") and not args:
            return z3.BoolVal(name == "TRUE")
        if name == "BOOLEAN" and not args:
            return self.e_SetOfBooleans(node, ctx)
        raise self.unsupported(f"operator {name}" if args or e is None else f"{name}", node, ctx)

    def inline(self, name, params, body, dctx: Ctx, args, node, ctx: Ctx):
        if len(params) != len(args):
            raise self.unsupported(f"{name} takes {len(params)} arguments, given {len(args)}", node, ctx)
        if name in ctx.stack:
            raise self.unsupported(f"recursive operator {name} (inlining would not terminate)", node, ctx)
        vals = {p: self.expr(a, ctx) for p, a in zip(params, args)}
        inner = replace(dctx, env={**dctx.env, **vals}, path=ctx.path, bvars=ctx.bvars, sinks=ctx.sinks,
                        primed=ctx.primed, stack=ctx.stack + (name,))
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
        return FuncV(s, lambda v: self.expr(d.body, inner.with_env(**{name: v})), text=d.name)

    def constant(self, name: str, ctx: Ctx):
        if name in self.constants:
            v = self.constants[name]
            if isinstance(v, bool):
                return z3.BoolVal(v)
            if isinstance(v, int):
                return Poly.const(v)
            raise Unsupported(f"constant {name} = {v!r} (only integers and booleans)", None)
        if name not in self._consts:
            sort = "bool" if name in self.m_bool_constants() else "int"
            c = z3.Bool(name) if sort == "bool" else z3.Int(name)
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
    def var_types(self, ctx: Ctx) -> dict[str, VarType]:
        if self._var_types is None:
            self._var_types = {}
            for tname in ("TypeOK", "TypeOk", "TypeInv", "TypeInvariant"):
                d = self.m.root_scope.entries.get(tname)
                if isinstance(d, OpDef) and not d.params:
                    for conj in _conjuncts(d.body):
                        if _name(conj) == "OperatorApplication" and conj.operator == "\\in" and \
                                _name(conj.arguments[0]) == "OperatorApplication" and \
                                not conj.arguments[0].arguments:
                            self._var_types.setdefault(conj.arguments[0].operator, _shape(conj.arguments[1]))
                    break
        return self._var_types

    def variable(self, name: str, primed: bool, node, ctx: Ctx):
        key = (name, primed)
        if key in self._vars:
            return self._vars[key]
        t = self.var_types(ctx).get(name)
        if t is None:
            raise self.unsupported(f"state variable {name} has no `{name} \\in S` conjunct in TypeOK", node, ctx)
        label = name + ("'" if primed else "")
        root = Ctx({}, self.m.root, self.m.root_scope)
        v = self._make_var(label, t, root, node)
        self._vars[key] = v
        return v

    def _make_var(self, label: str, t: VarType, ctx: Ctx, node):
        if t.kind == "int":
            c = z3.Int(label)
            self.free[label] = c
            return self.arith.opaque(c)
        if t.kind == "bool":
            c = z3.Bool(label)
            self.free[label] = c
            return c
        if t.kind == "fn":
            dom = self._var_domains.get(id(t.domain_node))
            if dom is None:
                dom = self.expr(t.domain_node, ctx)
                if not isinstance(dom, SetV) or dom.elem_sort != "int":
                    raise self.unsupported("a function-valued state variable needs an integer domain",
                                           t.domain_node, ctx)
                self._var_domains[id(t.domain_node)] = dom
            arr = z3.Array(label, z3.IntSort(), _z3_sort(t.range))
            self.free[label] = (arr, dom)
            return self._array_fn(arr, dom, t.range, ctx)
        raise self.unsupported(f"state variable type {t.kind}", node, ctx)

    def _array_fn(self, arr, dom: SetV, rt: VarType, ctx: Ctx) -> FuncV:
        def app(i):
            x = z3.Select(arr, self.arith.to_z3(i))
            if rt.kind == "int":
                return self.arith.opaque(x)
            if rt.kind == "bool":
                return x
            sub = self._var_domains.get(id(rt.domain_node))
            if sub is None:
                sub = self.expr(rt.domain_node, Ctx({}, self.m.root, self.m.root_scope))
                self._var_domains[id(rt.domain_node)] = sub
            return self._array_fn(x, sub, rt.range, ctx)
        return FuncV(dom, app, text=str(arr))

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

    def quantify(self, universal: bool, binds, body: Callable[[Ctx], z3.BoolRef], node, ctx: Ctx):
        if not binds:
            return body(ctx)
        (name, s), rest = binds[0], binds[1:]
        elems = self.candidates(s)
        if elems is not None:
            parts = []
            for e in elems:
                parts.append(self.quantify(universal, rest, body, node, ctx.with_env(**{name: e})))
            return (z3.And(*parts) if universal else z3.Or(*parts)) if parts else z3.BoolVal(universal)
        sort = s.elem_sort if s is not None else "int"
        x = self.fresh(name, sort)
        val = x if sort == "bool" else self.arith.opaque(x)
        mem = s.member(val) if s is not None else z3.BoolVal(True)
        sink: list = []
        inner = replace(ctx.with_env(**{name: val}), path=ctx.path + (mem,), bvars=ctx.bvars + (x,),
                        sinks=ctx.sinks + (sink,))
        b = self.quantify(universal, rest, body, node, inner)
        self._ctx_for_lemma = ctx
        hyp = z3.And(mem, *sink)
        return z3.ForAll([x], z3.Implies(hyp, b)) if universal else z3.Exists([x], z3.And(hyp, b))

    def ite(self, c, a, b, node, ctx):
        if isinstance(a, Poly) and isinstance(b, Poly):
            return self.arith.opaque(z3.If(c, self.arith.to_z3(a), self.arith.to_z3(b)))
        if isinstance(a, z3.BoolRef) and isinstance(b, z3.BoolRef):
            return z3.If(c, a, b)
        if isinstance(a, FuncV) and isinstance(b, FuncV) and a.domain is b.domain:
            return FuncV(a.domain, lambda i: self.ite(c, a.app(i), b.app(i), node, ctx), text="IF")
        raise self.unsupported(f"IF/CASE choosing between {self.describe(a)} and {self.describe(b)}"
                               " (only integers, booleans, functions of one domain)", node, ctx)

    def apply(self, f, x, node, ctx):
        if not isinstance(f, FuncV):
            raise self.unsupported(f"application of {self.describe(f)}", node, ctx)
        self.side("argument in DOMAIN of the function", f.domain.member(x), node, ctx)
        return f.app(x)

    def eq(self, a, b, node, ctx) -> z3.BoolRef:
        if isinstance(a, Poly) and isinstance(b, Poly):
            return self.arith.to_z3(a) == self.arith.to_z3(b)
        if isinstance(a, z3.BoolRef) and isinstance(b, z3.BoolRef):
            return a == b
        if isinstance(a, TupleV) and isinstance(b, TupleV):
            if len(a.items) != len(b.items):
                return z3.BoolVal(False)
            return z3.And(*[self.eq(x, y, node, ctx) for x, y in zip(a.items, b.items)])
        if isinstance(a, SetV) and isinstance(b, SetV):
            return self.set_eq(a, b, node, ctx)
        if isinstance(a, FuncV) and isinstance(b, FuncV):
            same = self.set_eq(a.domain, b.domain, node, ctx)
            pointwise = self.quantify(True, [("dom", a.domain)],
                                      lambda c: self.eq(a.app(c.env["dom"]), b.app(c.env["dom"]), node, c),
                                      node, ctx)
            return z3.And(same, pointwise)
        raise self.unsupported(f"comparing {self.describe(a)} with {self.describe(b)}", node, ctx)

    def set_eq(self, a: SetV, b: SetV, node, ctx) -> z3.BoolRef:
        if a is b:
            return z3.BoolVal(True)
        if a.elem_sort != b.elem_sort:
            return z3.BoolVal(False)
        if a.kind == "interval" and b.kind == "interval":
            alo, ahi, blo, bhi = (self.arith.to_z3(p) for p in (a.lo, a.hi, b.lo, b.hi))
            return z3.Or(z3.And(alo > ahi, blo > bhi), z3.And(alo == blo, ahi == bhi))
        if a.elems is not None and b.elems is not None:
            return z3.And(*[b.member(e) for e in a.elems], *[a.member(e) for e in b.elems])
        if a.elem_sort == "bool":
            vals = [z3.BoolVal(False), z3.BoolVal(True)]
            return z3.And(*[a.member(v) == b.member(v) for v in vals])
        return self.quantify(True, [("elem", None)],
                             lambda c: a.member(c.env["elem"]) == b.member(c.env["elem"]), node, ctx)

    # ------------------------------------------------------------ sets
    def interval(self, node, args, ctx):
        lo, hi = (self.expr(a, ctx) for a in args)
        if not (isinstance(lo, Poly) and isinstance(hi, Poly)):
            raise self.unsupported("a..b over non-integers", node, ctx)
        z = self.arith.to_z3
        return SetV("interval", lambda v: z3.And(z(lo) <= z(v), z(v) <= z(hi)), lo=lo, hi=hi, text="a..b")

    def membership(self, x, s, node, ctx) -> z3.BoolRef:
        if isinstance(s, SetV):
            if s.elem_sort == "bool":
                return z3.BoolVal(True) if isinstance(x, z3.BoolRef) else z3.BoolVal(False)
            if not isinstance(x, Poly):
                if s.kind == "enum":
                    return s.member(x)
                raise self.unsupported(f"{self.describe(x)} \\in a set of integers", node, ctx)
            return s.member(x)
        if isinstance(s, FnSetV):
            dom, rng = s.domain, s.range
            if not isinstance(x, FuncV):
                return z3.BoolVal(False)
            same = self.set_eq(x.domain, dom, node, ctx)
            inrange = self.quantify(True, [("dom", dom)],
                                    lambda c: self.membership(x.app(c.env["dom"]), rng, node, c), node, ctx)
            return z3.And(same, inrange)
        raise self.unsupported(f"membership in {self.describe(s)}", node, ctx)


def _union(a: SetV, b: SetV) -> SetV:
    return SetV("pred", lambda v: z3.Or(a.member(v), b.member(v)), elem_sort=a.elem_sort,
                elems=(a.elems + b.elems) if a.elems is not None and b.elems is not None else None)


def _conjuncts(node) -> list:
    k = _name(node)
    if k == "Parentheses":
        return _conjuncts(node.expression)
    if k == "VerticalList" and SYNONYMS.get(node.operator, node.operator) == "/\\":
        return [c for it in node.arguments for c in _conjuncts(it.expression)]
    if k == "OperatorApplication" and SYNONYMS.get(node.operator, node.operator) == "/\\":
        return [c for a in node.arguments for c in _conjuncts(a)]
    return [node]


def _shape(node) -> VarType:
    """The VarType of `v \\in S` from the syntax of S."""
    k = _name(node)
    if k == "Parentheses":
        return _shape(node.expression)
    if k == "SetOfBooleans":
        return VarType("bool")
    if k == "SetOfFunctions":
        return VarType("fn", domain_node=node.domain, range=_shape(node.codomain), range_node=node.codomain)
    if k == "OperatorApplication" and node.operator == "BOOLEAN":
        return VarType("bool")
    return VarType("int")


def _z3_sort(t: VarType):
    if t.kind == "int":
        return z3.IntSort()
    if t.kind == "bool":
        return z3.BoolSort()
    return z3.ArraySort(z3.IntSort(), _z3_sort(t.range))


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
    out = tr.eq(a, b, node, ctx)
    _oblige_domain(tr, args[0], a, b, node, ctx)
    return out


def _oblige_domain(tr, lhs_node, a, b, node, ctx):
    """`v' = g` for a function-typed variable: DOMAIN g must be v's TypeOK domain."""
    if not (isinstance(a, FuncV) and isinstance(b, FuncV)):
        return
    if _name(lhs_node) == "OperatorApplication" and lhs_node.operator == "'" and a.domain is not b.domain:
        tr.side("an action keeps the TypeOK domain of a function variable",
                tr.set_eq(a.domain, b.domain, node, ctx), node, ctx)


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
    return SetV("pred", lambda v: z3.And(a.member(v), z3.Not(b.member(v))), elem_sort=a.elem_sort,
                text="S \\ T")


def _setop(kind):
    def op(tr, node, args, ctx):
        a, b = (tr.expr(x, ctx) for x in args)
        if not (isinstance(a, SetV) and isinstance(b, SetV)):
            raise tr.unsupported(f"{node.operator} on non-sets", node, ctx)
        if kind == "cup":
            return _union(a, b)
        return SetV("pred", lambda v: z3.And(a.member(v), b.member(v)), elem_sort=a.elem_sort)
    return op


def _subseteq(tr, node, args, ctx):
    a, b = (tr.expr(x, ctx) for x in args)
    if not (isinstance(a, SetV) and isinstance(b, SetV)):
        raise tr.unsupported("\\subseteq on non-sets", node, ctx)
    return tr.quantify(True, [("elem", a)], lambda c: b.member(c.env["elem"]), node, ctx)


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
    ("'", 1): _prime, ("UNCHANGED", 1): _unchanged, ("DOMAIN", 1): _domain,
}


# ====================================================================== the prover
class Prover:
    """Proves the THEOREMs of one root module."""

    def __init__(self, path: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S, cfg_path: Path | None = None,
                 search_dirs: list[Path] | None = None):
        from hicache.tla.cfg import load_cfg
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.loader = Loader([self.path.parent, *(search_dirs or [])])
        self.root = self.loader.load_file(self.path)
        self.constants = load_cfg(cfg_path).constants if cfg_path else {}
        self.model = Model(self.loader, self.root, self.constants)

    def theorems(self) -> list[tuple[str, Any, Module]]:
        """The root module's own theorems (an EXTENDed module proves its own)."""
        return [t for t in self.model.theorems if t[2] is self.root]

    def prove_all(self) -> list[TheoremResult]:
        return [self.prove(name, goal, mod) for name, goal, mod in self.theorems()]

    def prove(self, name: str, goal, mod: Module) -> TheoremResult:
        t0 = time.monotonic()
        label = name or f"<unnamed at {node_loc(mod.file, goal)}>"
        tr = Translator(self.model, self.constants)
        try:
            background, hyps, g = self._translate(tr, goal, mod)
        except Unsupported as e:
            return TheoremResult(label, mod.name, Status.UNSUPPORTED, time.monotonic() - t0,
                                 f"{e.loc}: unsupported: {e.message}" if e.loc else f"unsupported: {e.message}",
                                 str(e.loc or ""))
        except TlaError as e:
            return TheoremResult(label, mod.name, Status.ERROR, time.monotonic() - t0, str(e), str(e.loc or ""))
        except RecursionError:
            return TheoremResult(label, mod.name, Status.UNSUPPORTED, time.monotonic() - t0,
                                 "unsupported: expression nests too deeply to inline", "")
        deadline = t0 + self.timeout_s
        status, detail = self._check_sides(tr, background, deadline)
        if status is None:
            status, detail = self._check_goal(tr, background + hyps, g, deadline)
        return TheoremResult(label, mod.name, status, time.monotonic() - t0, detail,
                             str(node_loc(mod.file, goal)))

    # ------------------------------------------------------------ translation
    def _translate(self, tr: Translator, goal, mod: Module):
        """(background, hypotheses, goal): background = ASSUMEs and arithmetic lemmas;
        hypotheses = the stripped bound ranges and antecedents (side conditions carry
        their own path, so they are checked against the background only)."""
        background: list = []
        for expr, actx in self.model.assumes:
            saved = list(tr.sides)
            try:
                background.append(tr.formula(expr, Ctx({}, actx.module, actx.scope)))
            except Unsupported:
                pass      # an ASSUME we cannot express only weakens the hypotheses
            tr.sides = saved
        hyps: list = []
        g = self._strip(tr, goal, Ctx({}, mod, self.model.root_scope), hyps)
        return background + tr.top_lemmas, hyps, g

    def _strip(self, tr: Translator, node, ctx: Ctx, hyps: list):
        """Turn leading \\A into free constants and => antecedents into hypotheses.

        The counterexample then names the theorem's own variables; Z3 sees the negation
        of the remaining body only.
        """
        k = _name(node)
        if k == "Parentheses":
            return self._strip(tr, node.expression, ctx, hyps)
        if k == "Quantification" and node.quantifier in ("\\A", "\\forall"):
            for name, s in tr.bounds(node.declarations, ctx):
                sort = s.elem_sort if s is not None else "int"
                label = name if name not in tr.free else f"{name}_{len(tr.free)}"
                c = z3.Bool(label) if sort == "bool" else z3.Int(label)
                tr.free[label] = c
                val = c if sort == "bool" else tr.arith.opaque(c)
                ctx = ctx.with_env(**{name: val})
                if s is not None:
                    mem = s.member(val)
                    hyps.append(mem)
                    ctx = ctx.assume(mem)
            return self._strip(tr, node.predicate, ctx, hyps)
        if k == "OperatorApplication" and node.operator == "=>":
            a = tr.formula(node.arguments[0], ctx)
            hyps.append(a)
            return self._strip(tr, node.arguments[1], ctx.assume(a), hyps)
        if k == "Let":
            for d in node.definitions:
                params = [p.operator if hasattr(p, "operator") else str(p) for p in (d.arity or [])]
                if d.function:
                    raise tr.unsupported("LET function definition", d, ctx)
                ctx = ctx.with_env(**{d.name: ("op", params, d.definiens, ctx, d) if params
                                      else tr.expr(d.definiens, ctx)})
            return self._strip(tr, node.expression, ctx, hyps)
        if k == "OperatorApplication" and not node.arguments and node.operator not in ctx.env:
            d = ctx.scope.entries.get(node.operator)
            if isinstance(d, OpDef) and not d.params and not d.is_fn and not d.is_instance:
                return self._strip(tr, d.body, Ctx({}, d.module, d.scope, path=ctx.path), hyps)
        return tr.formula(node, ctx)

    # ------------------------------------------------------------ solving
    def _solver(self, hyps, deadline: float) -> z3.Solver | None:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s = z3.Solver()
        s.set("timeout", max(1, int(left * 1000)))
        s.add(*hyps)
        return s

    def _check_sides(self, tr: Translator, hyps, deadline):
        sides, seen = [], set()
        for sc in tr.sides:
            key = sc.formula.get_id()
            if key not in seen:
                seen.add(key)
                sides.append(sc)
        if not sides:
            return None, ""
        s = self._solver(hyps, deadline)
        if s is None:
            return Status.UNKNOWN, f"timeout after {self.timeout_s:g} s (well-definedness)"
        s.add(z3.Not(z3.And(*[sc.formula for sc in sides])))
        r = s.check()
        if r == z3.unsat:
            return None, ""
        for sc in sides:       # locate the failing condition
            s = self._solver(hyps, deadline)
            if s is None:
                break
            s.add(z3.Not(sc.formula))
            r1 = s.check()
            if r1 == z3.sat:
                return Status.COUNTEREXAMPLE, (f"{sc.loc}: not well-defined: {sc.what} fails for "
                                               f"{self._model_text(tr, s.model())}")
            if r1 == z3.unknown:
                return Status.UNKNOWN, (f"{sc.loc}: cannot show {sc.what} "
                                        f"(z3: {s.reason_unknown()})")
        return Status.UNKNOWN, f"well-definedness: z3 {r} ({s.reason_unknown() if s else 'timeout'})"

    def _check_goal(self, tr: Translator, hyps, g, deadline):
        s = self._solver(hyps, deadline)
        if s is None:
            return Status.UNKNOWN, f"timeout after {self.timeout_s:g} s"
        s.add(z3.Not(g))
        r = s.check()
        if r == z3.unsat:
            return Status.PROVED, "Q.E.D." + self._vacuity_note(hyps, deadline)
        if r == z3.sat:
            return Status.COUNTEREXAMPLE, "counterexample: " + self._model_text(tr, s.model())
        why = s.reason_unknown()
        if "timeout" in why or "canceled" in why:
            return Status.UNKNOWN, f"timeout after {self.timeout_s:g} s"
        return Status.UNKNOWN, f"z3 gave up: {why}"

    def _vacuity_note(self, hyps, deadline) -> str:
        """A proof from contradictory hypotheses is valid but says nothing: flag it."""
        s = self._solver(hyps, deadline)
        if s is not None and s.check() == z3.unsat:
            return " (vacuous: the ASSUMEs and antecedents are contradictory)"
        return ""

    @staticmethod
    def _model_text(tr: Translator, m: z3.ModelRef) -> str:
        parts = []
        for name, v in tr.free.items():
            if isinstance(v, tuple):
                arr, dom = v
                parts.append(f"{name} = {_fn_text(m, arr, dom, tr)}")
            else:
                parts.append(f"{name} = {m.eval(v, model_completion=True)}")
        return ", ".join(parts) if parts else "(no free variables)"


def _fn_text(m: z3.ModelRef, arr, dom: SetV, tr: Translator) -> str:
    """[i |-> v, ...] over the domain when it is a small interval in the model."""
    if dom.kind == "interval":
        lo = m.eval(tr.arith.to_z3(dom.lo), model_completion=True)
        hi = m.eval(tr.arith.to_z3(dom.hi), model_completion=True)
        if z3.is_int_value(lo) and z3.is_int_value(hi) and hi.as_long() - lo.as_long() < 32:
            items = [f"{i} :> {m.eval(z3.Select(arr, i), model_completion=True)}"
                     for i in range(lo.as_long(), hi.as_long() + 1)]
            return "(" + " @@ ".join(items) + ")" if items else "<<>>"
    return str(m.eval(arr, model_completion=True))


def prove_files(paths: list[Path], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                cfg_path: Path | None = None) -> list[TheoremResult]:
    """Every THEOREM of every file; a file that does not load gives one error result."""
    out: list[TheoremResult] = []
    for p in paths:
        try:
            prover = Prover(Path(p), timeout_s=timeout_s, cfg_path=cfg_path)
        except TlaError as e:
            out.append(TheoremResult(f"<{Path(p).name}>", Path(p).stem, Status.ERROR, 0.0, str(e),
                                     str(e.loc or "")))
            continue
        out.extend(prover.prove_all())
    return out
