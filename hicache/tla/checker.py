"""Breadth-first explicit-state model checking with TLC's counting rules.

Counting (as TLC defines it):
  distinct   states added to the seen set (after VIEW/SYMMETRY reduction);
  generated  initial states generated + every successor produced by every action,
             duplicates included; a successor outside CONSTRAINT/ACTION_CONSTRAINT counts
             as generated but is neither added nor explored;
  depth      number of BFS levels, the initial states being level 1.
A violation's behavior is the BFS-tree path to the bad state: shortest by construction.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hicache.tla.cfg import Config
from hicache.tla.compiler import (
    F_IMPURE, F_STATE, UNSET, Compiler, Ctx, Model, OpDef, TemporalInPart, _pat_names,
)
from hicache.tla.errors import ConfigError, EvalError, Loc, SemanticError, TlaError
from hicache.tla.loader import Loader, node_loc
from hicache.tla.stdlib import SYNONYMS, TLCContext
from hicache.tla.values import Fcn, LazySet, as_frozenset, crossing, fmt, permute, sort_key, tagged


def _name(node) -> str:
    return type(node).__name__


@dataclass(slots=True)
class Action:
    """One disjunct of Next, as TLC reports it: `<Name line L, col C to ... of module M>`."""
    name: str
    loc: Loc
    module: str
    fn: Callable = None

    def label(self) -> str:
        return (f"<{self.name} line {self.loc.line}, col {self.loc.col} to line {self.loc.end_line}, "
                f"col {self.loc.end_col} of module {self.module}>")


@dataclass(slots=True)
class Step:
    state: tuple
    action: Action | None      # None for the initial state


@dataclass
class Result:
    result: str                # ok | deadlock | invariant | property | postcondition | error
    distinct: int = 0
    generated: int = 0
    depth: int = 0
    seconds: float = 0.0
    violated: str | None = None
    trace: list[Step] | None = None
    error: TlaError | None = None
    warnings: list[str] = field(default_factory=list)
    variables: list[str] = field(default_factory=list)
    queue_left: int = 0
    # the .cfg's ALIAS on each state of `trace`: (field, value) rows that the text behavior
    # shows in place of the variables (None: no ALIAS, or none evaluated)
    shown: list[list[tuple[str, Any]]] | None = None

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "postcondition": 10, "deadlock": 11, "invariant": 12, "property": 12,
                "liveness": 13}.get(self.result, 150)


@dataclass
class Checkable:
    """A model compiled for checking."""
    model: Model
    init: Callable
    actions: list[Action]
    invariants: list[tuple[str, Callable]]
    init_properties: list[tuple[str, Callable]]
    action_properties: list[tuple[str, Callable]]
    constraints: list[Callable]
    action_constraints: list[Callable]
    view: Callable | None
    symmetry: list[dict] | None
    check_deadlock: bool
    warnings: list[str]
    locs: dict = field(default_factory=dict)   # definition name -> Loc (for located errors)
    init_name: str = "Init"
    init_loc: Loc | None = None                # where the initial predicate is defined
    postcondition: tuple | None = None         # (name, code, Loc): cfg POSTCONDITION
    alias: tuple | None = None                 # (name, code, Loc): cfg ALIAS


def build(spec_path: str | Path, cfg: Config, search_dirs: list[Path] | None = None, *,
          allow_unchecked_properties: bool = False) -> Checkable:
    """Compile a model for checking. A PROPERTY part the checker cannot check (liveness:
    `<>P`, `P ~> Q`, fairness, a temporal formula under `=>`, ...) is a located error unless
    `allow_unchecked_properties`, when it becomes a warning and the safety parts are checked."""
    spec_path = Path(spec_path)
    loader = Loader([spec_path.parent] + list(search_dirs or []))
    root = loader.load_file(spec_path)
    model = Model(loader, root, dict(cfg.constants), dict(cfg.overrides))
    model.require_constants()
    _lookup = model.lookup_def

    def lookup_cfg_name(name: str) -> OpDef:
        """A definition the .cfg names; an unknown name is reported at its place in the .cfg."""
        try:
            return _lookup(name)
        except SemanticError as e:
            raise SemanticError(e.message, cfg.locs.get(name, e.loc)) from None
    model.lookup_def = lookup_cfg_name

    def cfg_def(name: str, section: str) -> OpDef:
        """The definition a .cfg section names: defined, and without parameters (it was
        called with none: an internal IndexError)."""
        d = model.lookup_def(name)
        where = cfg.locs.get(name, d.loc)
        if d.is_instance:
            raise ConfigError(f"{section} {name} names an instance of a module, not an operator", where)
        if d.params:
            n = len(d.params)
            raise ConfigError(f"{section} {name} takes {n} argument{'s' if n > 1 else ''} (defined at {d.loc}); "
                              f"the configuration can only name a definition without parameters", where)
        return d
    comp = Compiler(model)
    comp.resolve_every_definition()
    warnings: list[str] = []

    for expr, ctx in model.assumes:
        v = comp.value(expr, ctx)[0]((), None, ())
        if v is not True:
            raise EvalError("ASSUME is violated", node_loc(ctx.module.file, expr))

    # Init and Next: from INIT/NEXT or from SPECIFICATION Init /\ [][Next]_v /\ fairness
    if cfg.specification:
        cfg_def(cfg.specification, "SPECIFICATION")
        init_node, init_ctx, next_node, next_ctx = _split_spec(model, cfg.specification)
        init_name, init_loc = _init_where(init_node, init_ctx)
    else:
        if not cfg.init or not cfg.next:
            raise SemanticError("the configuration needs SPECIFICATION or both INIT and NEXT", Loc(cfg.file, 1, 1))
        d_init, d_next = cfg_def(cfg.init, "INIT"), cfg_def(cfg.next, "NEXT")
        init_node, init_ctx = d_init.body, Ctx(d_init.scope, varmode="init", module=d_init.module)
        next_node, next_ctx = d_next.body, Ctx(d_next.scope, module=d_next.module)
        init_name, init_loc = d_init.name, d_init.loc
    init_fn = comp.action(init_node, Ctx(init_ctx.scope, varmode="init", module=init_ctx.module))[0]

    actions = []
    top_name = cfg.next if not cfg.specification else _next_name(next_node)
    for name, node, ctx, loc_node, loc_mod in _split_actions(comp, next_node, next_ctx, top_name, next_node,
                                                             next_ctx.module):
        fn = comp.action(node, ctx)[0]
        actions.append(Action(name, node_loc(loc_mod.file, loc_node), loc_mod.name, fn))

    def state_pred(name: str, section: str) -> Callable:
        d = cfg_def(name, section)
        return comp.def_code(d, "value", "state", False, d.node)[0]

    invariants = [(nm, state_pred(nm, "INVARIANT")) for nm in cfg.invariants]
    locs = {name: model.lookup_def(name).loc for name in cfg.invariants}
    init_props, act_props = [], []
    unchecked: list[tuple[str, str, Loc]] = []
    props = _Properties(comp)
    for pname in cfg.properties:
        d = cfg_def(pname, "PROPERTY")
        locs.setdefault(pname, d.loc)
        for part in props.parts(d.body, Ctx(d.scope, module=d.module)):
            if part.kind == "init":
                init_props.append((pname, part.fn))
            elif part.kind == "always":
                invariants.append((pname, part.fn))
            elif part.kind == "action":
                act_props.append((pname, part.fn))
            else:
                unchecked.append((pname, part.what, part.loc))
    if unchecked and not allow_unchecked_properties:
        pname, what, loc = unchecked[0]
        more = f" (and {len(unchecked) - 1} more unchecked part{'s' if len(unchecked) > 2 else ''})" \
            if len(unchecked) > 1 else ""
        raise SemanticError(f"PROPERTY {pname}: {what} is not checked (hicache check checks state predicates, "
                            f"[]P and [][A]_v, also under \\A over a constant set; not liveness or other "
                            f"temporal formulas); pass --allow-unchecked-properties to check only the other "
                            f"parts{more}", loc)
    for pname, what, loc in unchecked:
        warnings.append(f"{loc}: property {pname}: {what} is not checked (liveness and other temporal "
                        f"formulas are not supported; allowed by --allow-unchecked-properties); its other parts "
                        f"are checked")
    constraints = [state_pred(c, "CONSTRAINT") for c in cfg.constraints]
    action_constraints = []
    for c in cfg.action_constraints:
        d = cfg_def(c, "ACTION_CONSTRAINT")
        action_constraints.append(comp.def_code(d, "value", "state", False, d.node)[0])
    view = state_pred(cfg.view, "VIEW") if cfg.view else None
    symmetry = None
    if cfg.symmetry:
        symmetry = _symmetry(cfg, cfg.symmetry, state_pred(cfg.symmetry, "SYMMETRY"), model)
    alias = None
    if cfg.alias:
        d = cfg_def(cfg.alias, "ALIAS")
        alias = (d.name, comp.def_code(d, "value", "state", False, d.node)[0], d.loc)
    post = None
    if cfg.postcondition:
        d = cfg_def(cfg.postcondition, "POSTCONDITION")
        post = (d.name, comp.def_code(d, "value", "state", False, d.node)[0], d.loc)
    return Checkable(model, init_fn, actions, invariants, init_props, act_props, constraints,
                     action_constraints, view, symmetry, cfg.check_deadlock, warnings, locs,
                     init_name, init_loc, post, alias)


class _NoState(tuple):
    """The state a constant-level formula (SYMMETRY, POSTCONDITION) is evaluated in: reading
    a variable is a located error naming it (it was an internal IndexError)."""

    def __new__(cls, variables: list[str], what: str):
        t = super().__new__(cls)
        t.variables, t.what = variables, what
        return t

    def __getitem__(self, i):
        raise EvalError(f"{self.what} reads the variable {self.variables[i]}: it is evaluated once, on no "
                        f"state, and must be constant-level")


def _symmetry(cfg: Config, name: str, code: Callable, model: Model) -> list[dict]:
    """SYMMETRY's permutations, each as a dict; a value that is not a set of permutations
    (of a set onto itself, as Permutations(S) returns) is a located error naming it."""
    where = cfg.locs.get(name)
    try:
        v = code(_NoState(model.variables, f"SYMMETRY {name}"), None, ())
    except TlaError as e:
        if e.loc is None:
            e.loc = where
        raise

    def refuse(why: str):
        shown = fmt(v)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise ConfigError(f"SYMMETRY {name} must be a set of permutations such as Permutations(S); {why} "
                          f"(it is {shown})", where)
    if type(v) is not frozenset and not isinstance(v, LazySet):
        refuse("it is not a set")
    out = []
    for p in as_frozenset(v):
        if isinstance(p, Fcn):
            d = p.d
        elif isinstance(p, tuple):
            d = {i + 1: x for i, x in enumerate(p)}
        else:
            refuse(f"its element {fmt(p)} is not a function")
        if len(set(d.values())) != len(d) or set(d.values()) != set(d.keys()):
            refuse(f"its element {fmt(p)} does not map its domain onto itself")
        out.append(d)
    return out


def _init_where(node, ctx: Ctx) -> tuple[str, Loc]:
    """The initial predicate's name and definition site (for `Init does not assign y`)."""
    if _name(node) == "OperatorApplication" and not node.arguments and isinstance(node.operator, str):
        e = ctx.scope.entries.get(node.operator)
        if isinstance(e, OpDef):
            return e.name, e.loc
    return "the initial predicate", node_loc(ctx.module.file, node)


def _unfold(model: Model, node, ctx: Ctx):
    """Follow zero-arity definitions and instance references to the defining body."""
    while True:
        k = _name(node)
        if k == "Parentheses":
            node = node.expression
            continue
        if k == "OperatorApplication" and not node.arguments and isinstance(node.operator, str):
            e = ctx.scope.entries.get(node.operator)
            if isinstance(e, OpDef) and not e.params and not e.is_instance and not e.is_fn:
                node, ctx = e.body, Ctx(e.scope, module=e.module)
                continue
        if k == "SubexpressionReference":
            first, last = node.items[0], node.items[-1]
            fname = first.operator if _name(first) == "OperatorApplication" else str(first)
            lname = last.operator if _name(last) == "OperatorApplication" else str(last)
            inst = ctx.scope.entries.get(fname)
            if isinstance(inst, OpDef) and inst.is_instance and len(node.items) == 2 \
                    and not (_name(last) == "OperatorApplication" and last.arguments):
                e = inst.body.entries.get(lname)
                if isinstance(e, OpDef) and not e.params:
                    node, ctx = e.body, Ctx(e.scope, module=e.module)
                    continue
        return node, ctx


def _conjuncts(model, node, ctx, top: bool = True):
    """Conjuncts of a temporal formula; definitions are unfolded only when temporal."""
    unfolded, uctx = _unfold(model, node, ctx)
    if top or _temporal(unfolded) or _is_conj(unfolded) and _temporal_deep(model, unfolded, uctx):
        node, ctx = unfolded, uctx
    else:
        yield node, ctx
        return
    k = _name(node)
    if k == "VerticalList" and node.operator in ("/\\", "\\land"):
        for it in node.arguments:
            yield from _conjuncts(model, it.expression, ctx, False)
    elif k == "OperatorApplication" and node.operator in ("/\\", "\\land"):
        for a in node.arguments:
            yield from _conjuncts(model, a, ctx, False)
    else:
        yield node, ctx


def _is_conj(node) -> bool:
    k = _name(node)
    return (k == "VerticalList" and node.operator in ("/\\", "\\land")) or \
        (k == "OperatorApplication" and node.operator in ("/\\", "\\land"))


def _temporal_deep(model, node, ctx) -> bool:
    """Whether a conjunction has a temporal conjunct, looking through definitions."""
    for c, cctx in _conjuncts(model, node, ctx, True):
        u, _ = _unfold(model, c, cctx)
        if _temporal(u):
            return True
    return False


def _split_spec(model: Model, spec_name: str):
    d = model.lookup_def(spec_name)
    init = nxt = None
    for node, ctx in _conjuncts(model, d.body, Ctx(d.scope, module=d.module)):
        k = _name(node)
        if k == "OperatorApplication" and node.operator == "[]":
            inner = node.arguments[0]
            if _name(inner) == "SubscriptedAction" and inner.operator == "[":
                nxt = (inner.action, ctx)
                continue
        if _temporal(node):
            continue  # fairness and temporal conjuncts do not constrain safety checking
        if init is None:
            init = (node, ctx)
        else:
            raise SemanticError(f"cannot read SPECIFICATION {spec_name}: expected Init /\\ [][Next]_vars",
                                d.loc)
    if init is None or nxt is None:
        raise SemanticError(f"cannot read SPECIFICATION {spec_name}: expected Init /\\ [][Next]_vars", d.loc)
    return init[0], init[1], nxt[0], nxt[1]


def _next_name(node) -> str:
    if _name(node) == "OperatorApplication" and isinstance(node.operator, str):
        return node.operator
    return "Next"


def _split_actions(comp: Compiler, node, ctx: Ctx, name: str, loc_node, loc_mod):
    """Split Next into TLC's actions: through \\/, zero-arity definitions and \\E."""
    k = _name(node)
    if k == "Parentheses":
        yield from _split_actions(comp, node.expression, ctx, name, loc_node, loc_mod)
        return
    if k == "VerticalList" and node.operator in ("\\/", "\\lor"):
        for it in node.arguments:
            yield from _split_actions(comp, it.expression, ctx, name, it.expression, loc_mod)
        return
    if k == "OperatorApplication" and node.operator in ("\\/", "\\lor"):
        for a in node.arguments:
            yield from _split_actions(comp, a, ctx, name, a, loc_mod)
        return
    if k == "OperatorApplication" and isinstance(node.operator, str) and not ctx.names:
        e = ctx.scope.entries.get(node.operator)
        if isinstance(e, OpDef) and not e.is_instance and not e.is_fn:
            if not node.arguments and not e.params:
                yield from _split_actions(comp, e.body, Ctx(e.scope, module=e.module), e.name, e.node, e.module)
                return
            yield (e.name, node, ctx, e.node, e.module)
            return
    if k == "Quantification" and node.quantifier == "\\E":
        subs = list(_disjuncts(node.predicate))
        if len(subs) > 1:  # \E distributes over \/: one action per disjunct
            for sub in subs:
                nm, ln, lm = _leaf_name(ctx, sub, name, loc_node, loc_mod)
                yield (nm, node._replace(predicate=sub), ctx, ln, lm)
            return
        nm, ln, lm = _leaf_name(ctx, node.predicate, name, loc_node, loc_mod)
        yield (nm, node, ctx, ln, lm)
        return
    yield (name, node, ctx, loc_node, loc_mod)


def _disjuncts(node):
    k = _name(node)
    if k == "Parentheses":
        yield from _disjuncts(node.expression)
    elif k == "VerticalList" and node.operator in ("\\/", "\\lor"):
        for it in node.arguments:
            yield from _disjuncts(it.expression)
    elif k == "OperatorApplication" and node.operator in ("\\/", "\\lor"):
        for a in node.arguments:
            yield from _disjuncts(a)
    else:
        yield node


def _leaf_name(ctx, node, name, loc_node, loc_mod):
    while _name(node) in ("Parentheses", "Quantification"):
        node = node.expression if _name(node) == "Parentheses" else node.predicate
    if _name(node) == "OperatorApplication" and isinstance(node.operator, str):
        e = ctx.scope.entries.get(node.operator)
        if isinstance(e, OpDef):
            return e.name, e.node, e.module
    return name, loc_node, loc_mod


@dataclass(slots=True)
class _Part:
    """One checkable part of a PROPERTY: `init` (a state predicate on the initial states),
    `always` ([]P: P on every state), `action` ([][A]_v: on every step), or `unchecked`
    (`what` at `loc`: liveness and other temporal formulas this checker does not check).
    `fn(st, pr, env)` takes the env of the context the part was found in."""
    kind: str
    fn: Callable | None = None
    what: str = ""
    loc: Loc | None = None


class _Properties:
    """Takes a PROPERTY apart into the parts the checker checks. Conjunctions split; `[]P`
    and `[][A]_v` are always/action parts; a definition (with or without arguments, also
    through an instance) is unfolded when its body is temporal; `\\A x \\in S : F` with S
    constant-level distributes over F's parts (`\\A x \\in S : []P` is `[](\\A x \\in S : P)`).
    Anything else temporal is an `unchecked` part, never a state predicate checked on the
    first state only. Parts are compiled in varmode "prop", where a temporal operator left
    inside (under IF, LET, =>, ...) raises TemporalInPart: that part is unchecked too."""

    def __init__(self, comp: Compiler):
        self.comp = comp
        self.temporal_defs: dict[int, bool] = {}    # id(OpDef) -> whether its body is temporal

    def loc(self, node, ctx: Ctx) -> Loc:
        return node_loc((ctx.module or self.comp.m.root).file, node)

    def parts(self, node, ctx: Ctx) -> list[_Part]:
        ctx = Ctx(ctx.scope, ctx.names, ctx.localops, "prop", False, ctx.module)
        try:
            return self._parts(node, ctx)
        except TemporalInPart as e:
            # (a temporal operator in an argument or a quantifier's set)
            return [_Part("unchecked", what=f"{self.snippet(node, ctx)} (it has a temporal operator at {e.loc})",
                          loc=self.loc(node, ctx))]

    def _parts(self, node, ctx: Ctx) -> list[_Part]:
        k = _name(node)
        if k == "Parentheses":
            return self.parts(node.expression, ctx)
        if not self.temporal(node, ctx):
            return [self.leaf("init", node, ctx)]
        if _is_conj(node):
            items = [it.expression for it in node.arguments] if k == "VerticalList" else node.arguments
            return [p for it in items for p in self.parts(it, ctx)]
        if k == "OperatorApplication" and node.operator == "[]":
            return self.box(node, ctx)
        if k == "Quantification" and node.quantifier == "\\A":
            return self.forall(node, ctx)
        callee = self.callee(node, ctx)
        if callee is not None:
            body, bctx, adapt = callee
            return [_Part(p.kind, adapt(p.fn), p.what, p.loc) if p.fn else p for p in self.parts(body, bctx)]
        return [self.unchecked(node, ctx)]

    def box(self, node, ctx: Ctx) -> list[_Part]:
        inner, ictx, adapt = node.arguments[0], ctx, None
        while True:
            if _name(inner) == "Parentheses":
                inner = inner.expression
                continue
            callee = self.callee(inner, ictx, zero_arity_only=True)
            if callee is None:
                break
            inner, ictx, a = callee
            adapt = a if adapt is None else (lambda f, a=a, b=adapt: b(a(f)))
        if _name(inner) == "SubscriptedAction" and inner.operator == "[":
            part = self.leaf("action", inner, ictx)
        elif not self.temporal(inner, ictx):
            part = self.leaf("always", inner, ictx)
        else:
            return [self.unchecked(node, ctx)]
        if part.fn is not None and adapt is not None:
            part.fn = adapt(part.fn)
        return [part]

    def forall(self, node, ctx: Ctx) -> list[_Part]:
        comp = self.comp
        bounds = comp.bounds(node.declarations, ctx)
        names = [n for pat, _ in bounds for n in _pat_names(pat)]
        sets = comp.bound_sets(bounds, ctx)
        # a set that changes from state to state: [] cannot move out of the quantifier
        varying = any(f & (F_STATE | F_IMPURE) for _, f in sets)
        out = []
        for p in self.parts(node.predicate, ctx.bind(*names)):
            if p.kind == "unchecked":
                out.append(p)
            elif varying and p.kind != "init":
                if not any(q.kind == "unchecked" and q.loc == self.loc(node, ctx) for q in out):
                    out.append(_Part("unchecked", what=f"{self.snippet(node, ctx)} (a temporal formula under \\A "
                                     f"over a set that depends on the state)", loc=self.loc(node, ctx)))
            else:
                out.append(_Part(p.kind, self._forall_fn(bounds, sets, p.fn)))
        return out

    def _forall_fn(self, bounds, sets, fn):
        iter_bind = self.comp.iter_bind

        def forall(st, pr, env):
            for env2 in iter_bind(bounds, sets, st, pr, env):
                v = fn(st, pr, env2)
                if v is not True:
                    return v        # FALSE, or a non-boolean the caller reports
            return True
        return forall

    def leaf(self, kind: str, node, ctx: Ctx) -> _Part:
        pctx = Ctx(ctx.scope, ctx.names, ctx.localops, "prop", False, ctx.module)
        return _Part(kind, self.comp.value(node, pctx)[0])    # (TemporalInPart: see parts)

    def unchecked(self, node, ctx: Ctx) -> _Part:
        return _Part("unchecked", what=self.snippet(node, ctx), loc=self.loc(node, ctx))

    def snippet(self, node, ctx: Ctx) -> str:
        """The formula as written (its first line, shortened), for messages."""
        loc = self.loc(node, ctx)
        try:
            lines = Path(loc.file).read_text().splitlines()
            text = lines[loc.line - 1][loc.col - 1:] if loc.line != loc.end_line \
                else lines[loc.line - 1][loc.col - 1:loc.end_col]
            text = " ".join(text.split())
        except (OSError, IndexError, ValueError):
            text = ""
        if not text:
            return f"the temporal formula ({_name(node)})"
        if len(text) > 60 or loc.line != loc.end_line:
            text = text[:57] + "..."
        return f"the temporal formula `{text}`"

    # ------------------------------------------------------------------ definitions
    def resolve(self, node, ctx: Ctx):
        """(definition, body ctx, argument nodes compiled in ctx, instance-argument count) of
        an application of a user definition or of an instance's operator, or None."""
        k = _name(node)
        if k == "OperatorApplication" and isinstance(node.operator, str):
            r = self.comp.resolve(SYNONYMS.get(node.operator, node.operator), ctx)
            if not isinstance(r, OpDef) or r.is_instance or r.is_fn:
                return None
            return r, list(node.arguments or []), [], 0
        if k == "SubexpressionReference":
            items = node.items
            first = items[0]
            name = first.operator if _name(first) == "OperatorApplication" else str(first)
            iargs = list(first.arguments or []) if _name(first) == "OperatorApplication" else []
            d = self.comp.resolve(name, ctx)
            if not isinstance(d, OpDef) or not d.is_instance:
                return None
            scope = d.body
            for it in items[1:-1]:
                nm = it.operator if _name(it) == "OperatorApplication" else str(it)
                nd = scope.entries.get(nm)
                if not isinstance(nd, OpDef) or not nd.is_instance:
                    return None
                scope = nd.body
            last = items[-1]
            opname = last.operator if _name(last) == "OperatorApplication" else str(last)
            oargs = list(last.arguments or []) if _name(last) == "OperatorApplication" else []
            target = scope.entries.get(opname)
            if not isinstance(target, OpDef) or target.is_instance or target.is_fn:
                return None
            return target, oargs, iargs, len(iargs)
        return None

    def callee(self, node, ctx: Ctx, zero_arity_only: bool = False):
        """(body, body ctx, adapt) to look into an applied definition: adapt maps code over
        the body's env to code over ctx's env (the arguments evaluated where it is used, as
        an application of the definition evaluates them)."""
        got = self.resolve(node, ctx)
        if got is None:
            return None
        d, args, iargs, n_inst = got
        if zero_arity_only and (args or iargs or d.params):
            return None
        if len(args) != len(d.params):
            raise self.comp.err(f"{d.name} takes {len(d.params)} arguments, got {len(args)}", node, ctx)
        bctx = Ctx(d.scope, tuple(("$i", "val") for _ in range(n_inst))
                   + tuple((p, "op" if a else "val") for p, a in d.params), (), ctx.varmode, False, d.module)
        fns = [self.comp.value(a, ctx)[0] for a in iargs] + \
              [self.comp.arg_value(a, ctx, ar)[0] for a, (_, ar) in zip(args, d.params)]
        if not fns:
            return d.body, bctx, (lambda f: (lambda st, pr, env: f(st, pr, ())))

        def adapt(f):
            return lambda st, pr, env: f(st, pr, tuple(g(st, pr, env) for g in fns))
        return d.body, bctx, adapt

    def temporal(self, node, ctx: Ctx) -> bool:
        """Whether a formula is temporal, looking into the definitions it applies (each
        definition's body once: a definition's temporality does not depend on its use)."""
        k = _name(node)
        if k == "Fairness":
            return True
        if k == "Parentheses":
            return self.temporal(node.expression, ctx)
        if k == "Quantification":
            return self.temporal(node.predicate, ctx)
        if k == "VerticalList":
            return any(self.temporal(it.expression, ctx) for it in node.arguments)
        if k in ("OperatorApplication", "SubexpressionReference"):
            if k == "OperatorApplication" and node.operator in ("[]", "<>", "~>", "-+->"):
                return True
            got = self.resolve(node, ctx)
            if got is not None:
                d = got[0]
                known = self.temporal_defs.get(id(d))
                if known is None:
                    self.temporal_defs[id(d)] = False       # (a recursive definition meets itself)
                    known = self.temporal_defs[id(d)] = self.temporal(d.body, Ctx(d.scope, module=d.module))
                if known:
                    return True
            args = (node.arguments or []) if k == "OperatorApplication" else \
                [a for it in node.items if _name(it) == "OperatorApplication" for a in (it.arguments or [])]
            return any(self.temporal(a, ctx) for a in args if not isinstance(a, str))
        return False


def _temporal(node) -> bool:
    k = _name(node)
    if k == "Fairness":
        return True
    if k == "Quantification":
        return _temporal(node.predicate)
    if k == "Parentheses":
        return _temporal(node.expression)
    if k == "VerticalList":
        return any(_temporal(it.expression) for it in node.arguments)
    if k == "OperatorApplication" and node.operator in ("[]", "<>", "~>", "-+->"):
        return True
    if k == "OperatorApplication":
        return any(_temporal(a) for a in (node.arguments or []) if not isinstance(a, str))
    return False


# ====================================================================== search
class Checker:
    def __init__(self, ck: Checkable, progress: Callable[[dict], None] | None = None,
                 progress_every: float = 2.0):
        self.ck = ck
        self.nvars = len(ck.model.variables)
        self.progress = progress
        self.progress_every = progress_every

    # --- helpers
    def _key(self, s: tuple):
        ck = self.ck
        if ck.view is not None:
            s = ck.view(s, None, ())
        if ck.symmetry:
            best = None
            for perm in ck.symmetry:
                ps = permute(s, perm)
                h = hash(ps)
                if best is None or h < best[0]:
                    best = (h, ps)
            return best[1]
        return s

    def _successors(self, st: tuple):
        blank = [UNSET] * self.nvars
        for act in self.ck.actions:
            for pr in act.fn(st, blank, ()):
                if UNSET in pr:
                    missing = [self.ck.model.variables[i] for i, v in enumerate(pr) if v is UNSET]
                    raise EvalError(f"successor state of action {act.name} does not assign {', '.join(missing)}",
                                    act.loc)
                yield act, tuple(pr)

    def _check_state(self, s: tuple):
        for name, inv in self.ck.invariants:
            v = inv(s, None, ())
            if v is not True:
                if v is False:
                    return name
                raise EvalError(f"invariant {name} evaluated to {fmt(v)}, not a boolean", self.ck.locs.get(name))
        return None

    def _in_model(self, s: tuple) -> bool:
        for c in self.ck.constraints:
            if c(s, None, ()) is not True:
                return False
        return True

    # --- breadth-first search
    def run(self) -> Result:
        ck = self.ck
        t0 = time.perf_counter()
        res = Result("ok", variables=list(ck.model.variables), warnings=list(ck.warnings))
        states: list[tuple] = []
        parents: list[int] = []
        acts: list[Action | None] = []
        levels: list[int] = []
        seen: dict = {}

        def trace_to(idx: int, extra: list[Step] = ()) -> list[Step]:
            path = []
            while idx >= 0:
                path.append(Step(states[idx], acts[idx]))
                idx = parents[idx]
            return path[::-1] + list(extra)

        self.head = 0

        def finish(kind: str, violated=None, trace=None, error=None):
            res.result, res.violated, res.trace, res.error = kind, violated, trace, error
            self._show(res)
            res.distinct = len(states)
            res.queue_left = max(0, len(states) - self.head)
            res.depth = max(levels) if levels else 0
            res.seconds = time.perf_counter() - t0
            return res

        cur_state = None
        try:
            TLCContext.level = 1
            blank = [UNSET] * self.nvars
            for pr in ck.init(None, blank, ()):
                s = self._initial(pr)
                res.generated += 1
                if not self._in_model(s):
                    continue
                if not _add_new(seen, self._key(s)):
                    continue
                states.append(s)
                parents.append(-1)
                acts.append(None)
                levels.append(1)
                cur_state = s
                bad = self._check_state(s)
                if bad:
                    return finish("invariant", bad, trace_to(len(states) - 1))
                for pname, p in ck.init_properties:
                    if p(s, None, ()) is not True:
                        return finish("property", pname, trace_to(len(states) - 1))

            head = 0
            last_report = time.perf_counter()
            check_deadlock = ck.check_deadlock
            act_props = ck.action_properties
            act_cons = ck.action_constraints
            constraints = ck.constraints
            invariants = ck.invariants
            use_key = ck.view is not None or bool(ck.symmetry)
            key = self._key
            while head < len(states):
                idx = head
                head += 1
                self.head = head
                st = states[idx]
                cur_state = st
                lvl = levels[idx]
                TLCContext.level = lvl
                any_succ = False
                for act, s2 in self._successors(st):
                    any_succ = True
                    res.generated += 1
                    if self.progress is not None and (res.generated & 4095) == 0:
                        # one state of a model with large constants can have 10^5 successors
                        now = time.perf_counter()
                        if now - last_report >= self.progress_every:
                            last_report = now
                            self.progress({"generated": res.generated, "distinct": len(states),
                                           "queue": len(states) - head, "depth": lvl, "seconds": now - t0})
                    for pname, p in act_props:
                        if p(st, s2, ()) is not True:
                            states.append(s2)
                            parents.append(idx)
                            acts.append(act)
                            levels.append(lvl + 1)
                            return finish("property", pname, trace_to(len(states) - 1))
                    if act_cons and not all(c(st, s2, ()) is True for c in act_cons):
                        continue
                    # TLCGet("level") in a CONSTRAINT or invariant is the new state's own level
                    TLCContext.level = lvl + 1
                    if constraints and not all(c(s2, None, ()) is True for c in constraints):
                        TLCContext.level = lvl
                        continue
                    k = key(s2) if use_key else s2
                    old = seen.get(k)
                    if old is not None:
                        # (Python's equality takes TRUE for 1: `_add_new` tells them apart)
                        if old is k or crossing(old, k) is None or not _add_new(seen, k):
                            TLCContext.level = lvl
                            continue
                    else:
                        seen[k] = k
                    states.append(s2)
                    parents.append(idx)
                    acts.append(act)
                    levels.append(lvl + 1)
                    for name, inv in invariants:
                        v = inv(s2, None, ())
                        if v is not True:
                            self.head = head
                            if v is False:
                                return finish("invariant", name, trace_to(len(states) - 1))
                            cur_state = s2
                            raise EvalError(f"invariant {name} evaluated to {fmt(v)}, not a boolean",
                                            ck.locs.get(name))
                    TLCContext.level = lvl
                if check_deadlock and not any_succ:
                    return finish("deadlock", None, trace_to(idx))
                # (every 16 states: a model with large constants can take a second per state,
                # and a caller's budget must be able to stop it; the clock read is noise here)
                if self.progress is not None and (head & 15) == 0:
                    now = time.perf_counter()
                    if now - last_report >= self.progress_every:
                        last_report = now
                        self.progress({"generated": res.generated, "distinct": len(states),
                                       "queue": len(states) - head, "depth": lvl,
                                       "seconds": now - t0})
            if ck.postcondition is not None:
                cur_state = None
                if not self._postcondition(len(states), res.generated, max(levels) if levels else 0,
                                           len(states) - head, time.perf_counter() - t0):
                    return finish("postcondition", ck.postcondition[0])
        except TlaError as e:
            if cur_state is not None and e.state is None:
                e.state = format_state(ck.model.variables, cur_state)
            return finish("error", None, None, e)
        except RecursionError:
            return finish("error", None, None, EvalError("recursion too deep"))
        return finish("ok")

    def _initial(self, pr) -> tuple:
        """An initial state from Init's assignment; a variable it leaves free is an error
        located at Init's definition."""
        if UNSET in pr:
            missing = [self.ck.model.variables[i] for i, v in enumerate(pr) if v is UNSET]
            raise EvalError(f"{self.ck.init_name} does not assign {', '.join(missing)}", self.ck.init_loc)
        return tuple(pr)

    def _postcondition(self, distinct: int, generated: int, depth: int, queue: int, seconds: float) -> bool:
        """Evaluate the cfg POSTCONDITION once, after the search (as TLC does): a constant-level
        formula that may read the run's statistics through TLCGet("stats")."""
        name, code, loc = self.ck.postcondition
        TLCContext.stats = Fcn({"distinct": distinct, "generated": generated, "diameter": depth,
                                "queue": queue, "duration": int(seconds)})
        try:
            v = code(_NoState(self.ck.model.variables, f"POSTCONDITION {name}"), None, ())
        except TlaError as e:
            if e.loc is None:
                e.loc = loc
            raise
        finally:
            TLCContext.stats = None
        if v is True or v is False:
            return v
        raise EvalError(f"POSTCONDITION {name} evaluated to {fmt(v)}, not a boolean", loc)

    # --- random simulation
    def simulate(self, depth: int, num: int, seed: int) -> Result:
        """`num` random behaviors of at most `depth` states; invariants checked on each state."""
        ck = self.ck
        rng = random.Random(seed)
        TLCContext.rng = random.Random(seed)
        t0 = time.perf_counter()
        res = Result("ok", variables=list(ck.model.variables), warnings=list(ck.warnings))
        seen: dict = {}
        blank = [UNSET] * self.nvars
        try:
            inits = [self._initial(p) for p in ck.init(None, blank, ())]
            inits = [s for s in inits if self._in_model(s)]
            inits.sort(key=sort_key)   # repr of a set follows hash order: not stable across runs
            res.generated += len(inits)
            max_depth = 0
            for _ in range(num if inits else 0):
                s = rng.choice(inits)
                trace = [Step(s, None)]
                _add_new(seen, self._key(s))
                bad = self._check_state(s)
                if bad:
                    res.result, res.violated, res.trace = "invariant", bad, trace
                    return self._done(res, t0, len(seen), len(trace))
                for pname, p in ck.init_properties:
                    if p(s, None, ()) is not True:
                        res.result, res.violated, res.trace = "property", pname, trace
                        return self._done(res, t0, len(seen), len(trace))
                for lvl in range(1, depth):
                    TLCContext.level = lvl
                    succ = list(self._successors(s))
                    res.generated += len(succ)
                    succ = [(a, s2) for a, s2 in succ
                            if all(c(s, s2, ()) is True for c in ck.action_constraints) and self._in_model(s2)]
                    if not succ:
                        if ck.check_deadlock and lvl >= 1 and not list(self._successors(s)):
                            res.result, res.trace = "deadlock", trace
                            return self._done(res, t0, len(seen), len(trace))
                        break
                    succ.sort(key=lambda x: (x[0].name, sort_key(x[1])))
                    act, s2 = rng.choice(succ)
                    for pname, p in ck.action_properties:
                        if p(s, s2, ()) is not True:
                            trace.append(Step(s2, act))
                            res.result, res.violated, res.trace = "property", pname, trace
                            return self._done(res, t0, len(seen), len(trace))
                    s = s2
                    trace.append(Step(s, act))
                    _add_new(seen, self._key(s))
                    bad = self._check_state(s)
                    if bad:
                        res.result, res.violated, res.trace = "invariant", bad, trace
                        return self._done(res, t0, len(seen), len(trace))
                max_depth = max(max_depth, len(trace))
            if ck.postcondition is not None and not self._postcondition(
                    len(seen), res.generated, max_depth, 0, time.perf_counter() - t0):
                res.result, res.violated = "postcondition", ck.postcondition[0]
            return self._done(res, t0, len(seen), max_depth)
        except TlaError as e:
            res.result, res.error = "error", e
            return self._done(res, t0, len(seen), 0)

    def _done(self, res: Result, t0: float, distinct: int, depth: int) -> Result:
        res.distinct, res.depth, res.seconds = distinct, depth, time.perf_counter() - t0
        self._show(res)
        return res

    def _show(self, res: Result) -> None:
        """The .cfg's ALIAS on each state of res.trace, the rows TLC prints in place of the
        variables. A primed variable in it reads the trace's next state (the last state has
        none: a primed read there is an evaluation error). A state where the alias fails, or
        is not a record, shows its variables, and a warning says why."""
        if self.ck.alias is None or not res.trace:
            return
        name, code, _ = self.ck.alias
        shown = []
        for i, step in enumerate(res.trace):
            nxt = res.trace[i + 1].state if i + 1 < len(res.trace) else None
            try:
                v = code(step.state, nxt, ())
                why = None if isinstance(v, Fcn) and all(type(k) is str for k in v.d) else f"is {fmt(v)}, not a record"
            except TlaError as e:
                why = f"could not be evaluated ({e})"
            if why is None:
                shown.append(list(v.d.items()))
            else:
                res.warnings.append(f"ALIAS {name} {why} in state {i + 1}: its variables are shown")
                shown.append(list(zip(res.variables, step.state)))
        res.shown = shown


_TAGGED = object()


def _add_new(seen: dict, k) -> bool:
    """Add the state (or VIEW/SYMMETRY key) k to the seen-set unless it is there; whether it was
    new. The seen-set maps a key to itself. Python's equality (and hash) takes TRUE for 1, where
    TLC's fingerprints tell them apart: a key that Python pairs with a seen one but that holds
    a boolean where that one holds an integer (`crossing`) is a new state, kept under a key
    that tags booleans (`tagged`, marked: no plain key equals it)."""
    old = seen.get(k)
    if old is None:
        seen[k] = k
        return True
    if old is k or crossing(old, k) is None:
        return False
    tk = (_TAGGED, tagged(k))
    if tk in seen:
        return False
    seen[tk] = tk
    return True


def format_state(variables: list[str], s: tuple) -> str:
    return "\n".join(f"/\\ {v} = {fmt(x)}" for v, x in zip(variables, s))


def check_file(spec: str | Path, cfg: Config, **kw) -> Result:
    """Build and run a BFS check; evaluation and semantic errors become result 'error'."""
    try:
        ck = build(spec, cfg)
    except TlaError as e:
        return Result("error", error=e)
    return Checker(ck, **kw).run()
