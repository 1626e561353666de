"""Compile TLA+ syntax trees to Python closures.

Two kinds of compiled code:
  value code   f(st, pr, env) -> value
  action code  a(st, pr, env) -> list of primed assignments (each a list, UNSET where free)
`st` is the current state (a tuple indexed by variable), `pr` the primed assignment being
built, `env` a tuple of bound values with indices resolved at compile time (lexical
addressing). In init mode (compiling Init) unprimed variables denote the slots being
assigned, so Init is enumerated by the same machinery as Next.

Closed constant subexpressions (no variables, no bound names, no side effects) are
evaluated once, on first use, and cached: `1..N`, `[Procs -> Vals]`, constant operators.
"""
from __future__ import annotations

import ast as _pyast
import operator
from operator import is_ as _is
from dataclasses import dataclass, field
from typing import Any, Callable

from hicache.tla.errors import EvalError, Loc, SemanticError, TlaError
from hicache.tla.loader import Loader, Module, node_loc
from hicache.tla.stdlib import BOOLEAN, BUILTINS, CONSTANTS, MODULE_NAMES, MODULE_PROVIDED, STRING, SYNONYMS
from hicache.tla.values import (
    _CONTAINERS, KK_BOOL, KK_NESTED, Closure, Fcn, LazySet, ModelValue, RecFcn, RecordSet, FcnSet, crossing, crossing_error, fmt, in_domain, in_set,
    fcn_key_ok, is_infinite, iter_values, key_kinds, kinds_differ, mk_fcn, normalize, set_has, set_of, sorted_values, stored, tla_eq,
)


class TemporalInPart(SemanticError):
    """A temporal operator met where a state or step is evaluated (the checker reports such
    a PROPERTY part as not checked)."""


class UnknownName(SemanticError):
    """A name that resolves to nothing in scope (SANY: "Unknown operator")."""


class NameConflict(SemanticError):
    """A name bound or defined where another of that name is visible (SANY has no
    shadowing: "Multiply-defined symbol")."""


def _first_that_compiles(*compiles: Callable[[], Any]) -> None:
    """Run the compiles in turn until one succeeds, for the names they resolve: an
    UnknownName or a NameConflict is raised at once, another compile error tries the next
    (and after the last, is left to a use that meets it)."""
    for compile_ in compiles:
        try:
            compile_()
            return
        except (UnknownName, NameConflict):
            raise
        except TlaError:
            continue


class _Unset:
    __slots__ = ()

    def __repr__(self):
        return "UNSET"


UNSET = _Unset()
_MISS = object()
_SIMPLE = (int, bool, str, tuple, frozenset, Fcn)
_KK_BOOL_NESTED = KK_BOOL | KK_NESTED

# flags describing what a compiled expression depends on
F_STATE = 1     # reads state variables (or primes)
F_ENV = 2       # reads bound names
F_IMPURE = 4    # side effects / evaluation context (Print, TLCGet): never cached


def _name(node) -> str:
    return type(node).__name__


_NOTHING = object()    # no value at that key


def _differ(u, v) -> bool:
    """Whether Python's equality surely tells u from v (False when it cannot say: comparing
    them raised, a lazy set's materialization say)."""
    try:
        return u != v
    except Exception:  # noqa: BLE001 - any error: not decided here
        return False


# ====================================================================== scopes
@dataclass(slots=True)
class OpDef:
    """A user definition: operator, function definition, or instance."""
    name: str
    params: list[tuple[str, int]]        # (name, arity); arity > 0 for operator parameters
    body: Any                            # AST of the definiens
    scope: "Scope"
    node: Any
    module: Module
    is_fn: bool = False                  # f[x \in S] == e
    is_instance: bool = False
    cache: dict = field(default_factory=dict)   # (kind, varmode, primed) -> (code, flags)
    compiling: set = field(default_factory=set)

    @property
    def loc(self) -> Loc:
        return node_loc(self.module.file, self.node)


@dataclass(slots=True)
class Subst:
    """An instance parameter substituted by an expression of the instantiating context."""
    expr: Any
    ctx: "Ctx"


class Scope:
    """Names visible at module level in one module instance."""

    def __init__(self, module: Module | None):
        self.module = module
        self.entries: dict[str, Any] = {}
        # each symbol declared here (constant, variable, definition, theorem, named ASSUME):
        # its declaring node and location. SANY rejects a second declaration of a name;
        # the same node reached again (a module EXTENDed along two paths) is no second one.
        self.sites: dict[str, tuple[Any, Loc]] = {}

    def declare(self, name: str, node: Any, loc: Loc) -> None:
        """Claim `name` for `node`; SemanticError at `loc` when another node holds it."""
        held = self.sites.get(name)
        if held is None:
            self.sites[name] = (node, loc)
        elif held[0] is not node:
            first, second = held[1], loc
            # (constants are declared before variables and definitions: say the later in the file)
            if first.file == second.file and (second.line, second.col) < (first.line, first.col):
                first, second = second, first
            raise SemanticError(f"multiply-defined symbol {name} (also defined at {first})", second)


@dataclass(slots=True)
class LocalOp:
    """A LET operator with parameters: compiled body over env[:prefix] + args."""
    name: str
    params: list[tuple[str, int]]
    body: Any
    prefix: int
    names: tuple
    cache: dict = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class Ctx:
    scope: Scope
    names: tuple = ()          # bound names in env order: (name, kind) kind in val|lazy|op|localop
    localops: tuple = ()       # LocalOp objects, parallel lookups by name
    # "state" | "init" | "prop": "prop" is a part of a PROPERTY that the checker evaluates
    # on states/steps (state semantics), where a temporal operator left inside is refused
    varmode: str = "state"
    primed: bool = False
    module: Module | None = None

    def bind(self, *names: str, kind: str = "val") -> "Ctx":
        return Ctx(self.scope, self.names + tuple((n, kind) for n in names), self.localops,
                   self.varmode, self.primed, self.module)


class Model:
    """A loaded root module with constants bound: the compile-time universe of one check."""

    def __init__(self, loader: Loader, root: Module, constants: dict[str, Any],
                 overrides: dict[str, str] | None = None):
        self.loader = loader
        self.root = root
        self.variables: list[str] = []
        self.var_index: dict[str, int] = {}
        self.const_values = constants
        self.overrides = overrides or {}
        self.assumes: list[tuple[Any, Ctx]] = []
        self.theorems: list[tuple[str, Any, Module]] = []
        self._building: list[str] = []
        self._ext_loc: Loc | None = None
        self.root_scope = self._build_scope(root, None, {})
        self._apply_overrides()

    # --------------------------------------------------------- scope construction
    def _build_scope(self, mod: Module, parent_subst: dict | None, subst: dict,
                     scope: Scope | None = None, top: bool = True) -> Scope:
        """Create the scope of `mod`; EXTENDS merge into it, INSTANCE creates sub-scopes.

        `subst` maps this instance's constant/variable names to Subst entries (instances);
        at the root it is empty and constants come from the configuration.
        """
        if mod.name in self._building:
            cycle = " -> ".join(self._building[self._building.index(mod.name):] + [mod.name])
            raise SemanticError(f"circular EXTENDS/INSTANCE: {cycle}", self._ext_loc or mod.loc(mod.ast))
        self._building.append(mod.name)
        try:
            return self._build_scope_body(mod, parent_subst, subst, scope)
        finally:
            self._building.pop()

    def _build_scope_body(self, mod: Module, parent_subst: dict | None, subst: dict,
                          scope: Scope | None) -> Scope:
        scope = scope or Scope(mod)
        for ext, ext_node in zip(mod.extends, mod.ast.extendees or []):
            self._ext_loc = mod.loc(ext_node)   # where a cycle closes, for the error
            em = self.loader.get(ext, self._ext_loc)
            if em is not None:
                self._build_scope(em, parent_subst, subst, scope, top=False)
        for name, arity, node in mod.constants:
            scope.declare(name, node, mod.loc(node))
            if name in subst:
                scope.entries[name] = subst[name]
            elif parent_subst is None:
                scope.entries[name] = ("const", name, arity, node, mod)
            else:  # an instance parameter left implicit: same name in the instantiator
                raise SemanticError(f"instance of {mod.name} does not substitute constant {name}",
                                    mod.loc(node))
        for name, node in mod.variables:
            scope.declare(name, node, mod.loc(node))
            if name in subst:
                scope.entries[name] = subst[name]
            elif parent_subst is None:
                if name not in self.var_index:
                    self.var_index[name] = len(self.variables)
                    self.variables.append(name)
                scope.entries[name] = ("var", self.var_index[name])
            else:
                raise SemanticError(f"instance of {mod.name} does not substitute variable {name}",
                                    mod.loc(node))
        for u in mod.units:
            kind = _name(u)
            if kind == "OperatorDefinition":
                self._add_def(scope, mod, u)
            elif kind == "Instance":
                self._add_instance(scope, mod, u, u, None, [])
            elif kind == "Axiom":
                if u.name:
                    scope.declare(u.name, u, mod.loc(u))
                if parent_subst is None:
                    self.assumes.append((u.expression, Ctx(scope, module=mod)))
            elif kind == "Theorem":
                if u.name:      # (located at its goal, as the prover reports a theorem)
                    scope.declare(u.name, u, mod.loc(u.goal))
                self.theorems.append((u.name or "", u.goal, mod))
        return scope

    def _add_def(self, scope: Scope, mod: Module, u) -> None:
        params = []
        for p in u.arity or []:
            if _name(p) == "OperatorApplication":
                params.append((p.operator, len(p.arguments) if p.arguments else 0))
            else:
                params.append((str(p), 0))
        body = u.definiens
        scope.declare(u.name, u, mod.loc(u))
        old = scope.entries.get(u.name)
        if isinstance(old, OpDef) and old.node is u:
            return  # the same module reached twice through EXTENDS (a diamond)
        if _name(body) == "Instance":
            self._add_instance(scope, mod, u, body, u.name, params)
            return
        scope.entries[u.name] = OpDef(u.name, params, body, scope, u, mod, is_fn=bool(u.function))

    def _apply_overrides(self) -> None:
        """TLC's configuration substitutions: `Name <- Def` and `Name = value` apply to constants
        and to defined operators alike; every declared constant must be given."""
        entries = self.root_scope.entries
        for name, target in self.overrides.items():
            e = entries.get(name)
            if isinstance(e, OpDef):
                t = entries.get(target)
                if not isinstance(t, OpDef):
                    raise SemanticError(f"the configuration substitutes {name} <- {target}, but {target} is not "
                                        f"defined", e.loc)
                entries[name] = t
            elif e is None:
                raise SemanticError(f"the configuration substitutes {name}, which the module does not declare",
                                    Loc(self.root.file, 0, 0))
        for name in list(self.const_values):
            e = entries.get(name)
            if isinstance(e, OpDef) and not e.is_instance:
                entries[name] = ("const", name, 0, e.node, e.module)

    def require_constants(self) -> None:
        """Model checking needs every declared constant given (TLC rejects the model up front);
        symbolic uses of a Model (Z3, code generation) leave them open."""
        for name, e in self.root_scope.entries.items():
            if isinstance(e, tuple) and e[0] == "const" and name not in self.const_values \
                    and name not in self.overrides:
                _, _, arity, decl, mod = e
                raise SemanticError(f"constant {name} is not given a value (or a substitution) by the "
                                    f"configuration", node_loc(mod.file, decl))

    def _add_instance(self, scope: Scope, mod: Module, node, inst, name: str | None, params) -> None:
        target = self.loader.get(inst.name, mod.loc(node))
        if target is None:  # a standard module: nothing to substitute
            if name is None:
                return
            target_scope = Scope(None)
            scope.entries[name] = OpDef(name, params, target_scope, scope, node, mod, is_instance=True)
            return
        inst_ctx = Ctx(scope, tuple((p, "val") for p, _ in params), module=mod)
        subst: dict = {}
        for w in inst.with_substitution or []:
            subst[w.name] = Subst(w.expression, inst_ctx)
        # Implicit substitution: a parameter with no WITH takes the same name here.
        names = [c[0] for c in self._all_decls(target, "constants")] + \
            [v[0] for v in self._all_decls(target, "variables")]
        for n in names:
            if n not in subst:
                ident = _pyast_ident(n)
                subst[n] = Subst(ident, inst_ctx)
        target_scope = self._build_scope(target, subst, subst, None)
        if name is None:
            # its non-LOCAL definitions become this module's, declared as its own are: one
            # that names what the module declares too is SANY's multiply-defined symbol
            for k, v in target_scope.entries.items():
                if isinstance(v, OpDef) and not getattr(v.node, "local", None):
                    held = scope.sites.get(k)
                    if held is not None and held[0] is not v.node:    # (declared before it)
                        raise SemanticError(f"multiply-defined symbol {k} (INSTANCE {inst.name} defines it at "
                                            f"{v.loc}, also defined at {held[1]})", mod.loc(node))
                    scope.declare(k, v.node, v.loc)
                    scope.entries.setdefault(k, v)
        else:
            scope.entries[name] = OpDef(name, params, target_scope, scope, node, mod, is_instance=True)

    def _all_decls(self, mod: Module, attr: str) -> list:
        """Constants or variables declared by `mod` and the modules it extends."""
        out = list(getattr(mod, attr))
        for ext in mod.extends:
            em = self.loader.get(ext)
            if em is not None:
                out += self._all_decls(em, attr)
        return out

    # --------------------------------------------------------- entry points
    def ctx(self, varmode: str = "state") -> Ctx:
        return Ctx(self.root_scope, varmode=varmode, module=self.root)

    def lookup_def(self, name: str) -> OpDef:
        e = self.root_scope.entries.get(name)
        if not isinstance(e, OpDef):
            raise SemanticError(f"the configuration names {name}, which the module does not define",
                                Loc(self.root.file, 0, 0))
        return e

    def compile_value(self, node, ctx: Ctx) -> Callable:
        return Compiler(self).value(node, ctx)[0]

    def compile_action(self, node, ctx: Ctx) -> Callable:
        return Compiler(self).action(node, ctx)[0]

    def def_value(self, name: str, varmode: str = "state") -> Callable:
        """Value code of a zero-arity definition of the root module."""
        d = self.lookup_def(name)
        return Compiler(self).def_code(d, "value", varmode, False, d.node)[0]

    def def_action(self, name: str, varmode: str = "state") -> Callable:
        d = self.lookup_def(name)
        return Compiler(self).def_code(d, "action", varmode, False, d.node)[0]


def _pyast_ident(name: str):
    """A synthetic identifier node (for implicit instance substitutions)."""
    from tla._ast import OperatorApplication
    return OperatorApplication(operator=name, arguments=None)


# ====================================================================== compiler
class Compiler:
    def __init__(self, model: Model):
        self.m = model
        # inside resolve_every_definition: a constant without a value compiles to code that
        # raises its error when evaluated, so that the names after it are resolved too
        self.resolving = False
        self._extends: dict[str, frozenset[str]] = {}    # module file -> _extended_files
        # (module file, name, passed) -> _standard_names
        self._std_names: dict[tuple, frozenset | None] = {}

    # ------------------------------------------------------------ helpers
    def err(self, msg: str, node, ctx: Ctx, cls=SemanticError) -> TlaError:
        mod = ctx.module or self.m.root
        return cls(msg, node_loc(mod.file, node))

    def loc(self, node, ctx: Ctx) -> Loc:
        mod = ctx.module or self.m.root
        return node_loc(mod.file, node)

    def wrap_errors(self, fn, node, ctx: Ctx):
        """Attach the source location to evaluation errors raised inside fn."""
        loc = self.loc(node, ctx)

        def located(st, pr, env):
            try:
                return fn(st, pr, env)
            except TlaError as e:
                if e.loc is None:
                    e.loc = loc
                raise
            except RecursionError:
                raise EvalError("recursion too deep (unbounded recursive definition?)", loc) from None
        return located

    def const_fold(self, fn, flags: int):
        """Cache closed constant expressions: evaluated once, on first use."""
        if flags:
            return fn
        cell: list = []

        def cached(st, pr, env):
            if cell:
                return cell[0]
            v = fn(st, pr, env)
            cell.append(v)
            return v
        return cached

    # ------------------------------------------------------------ definitions
    def def_code(self, d: OpDef, kind: str, varmode: str, primed: bool, use_node) -> tuple:
        key = (kind, varmode, primed)
        hit = d.cache.get(key)
        if hit is not None:
            return hit
        if key in d.compiling:
            # recursive operator: indirect through a cell filled once compiled; every
            # recursive reference in the body must share the one cell that gets filled
            cell: list = d.cache.setdefault(("cell",) + key, [])

            def rec(st, pr, env):
                return cell[0](st, pr, env)
            return rec, F_STATE | F_IMPURE
        d.compiling.add(key)
        try:
            self._refuse_shadowing(Ctx(d.scope, module=d.module), [p for p, _ in d.params], d.node)
            ctx = Ctx(d.scope, tuple((p, "op" if a else "val") for p, a in d.params),
                      (), varmode, primed, d.module)
            if d.is_fn:
                code, flags = self.recursive_fn(d, ctx)
            elif kind == "action":
                code, flags = self.action(d.body, ctx)
            else:
                code, flags = self.value(d.body, ctx)
            if d.params:
                flags &= ~F_ENV
        finally:
            d.compiling.discard(key)
        cell = d.cache.get(("cell",) + key)
        if cell is not None:
            code = self._guard_recursion(code, d)
            cell.append(code)
            flags |= F_STATE | F_IMPURE
        elif flags == 0 and not d.params:
            code = self.const_fold(code, flags)
        d.cache[key] = (code, flags)
        return code, flags

    @staticmethod
    def _guard_recursion(code, d: OpDef):
        """Unbounded recursion of a RECURSIVE operator: a located error, not a traceback."""
        loc = d.loc

        def guarded(st, pr, env):
            try:
                return code(st, pr, env)
            except RecursionError:
                raise EvalError(f"recursion too deep in {d.name} (does its recursion terminate?)", loc) from None
        return guarded

    def recursive_fn(self, d: OpDef, ctx: Ctx):
        """f[x \\in S, ...] == e, possibly recursive: a RecFcn over S, memoized per value."""
        node = d.body
        bounds = self.bounds(node.declaration, ctx)
        if len(bounds) != 1 or not isinstance(bounds[0][0], str):
            # non-recursive multi-argument function definition: build it eagerly
            return self.value(node, ctx)
        pat, set_node = bounds[0]
        set_fn, sflags = self.value(set_node, ctx)
        # the function's own name is bound to the RecFcn being built, so its recursive
        # calls share one memo table (fib[n-1] + fib[n-2] is linear, not exponential)
        body_fn, bflags = self.value(node.value, self._bind(ctx.bind(d.name), [pat], node))

        def make(st, pr, env):
            f = RecFcn(set_fn(st, pr, env), None)
            env2 = env + (f,)
            f.body = lambda x: body_fn(st, pr, env2 + (x,))
            return f
        return make, (sflags | bflags) & ~F_ENV

    def resolve_every_definition(self) -> None:
        """SANY resolves every name of every module, used or not, where this compiler only
        compiles what a check reaches: a definition nothing uses could name something
        undefined and pass here, then be refused by TLC. So each user definition (the
        root's, the modules' it extends, its instances') is compiled once for the names it
        uses, as a value and else as an action: an UnknownName (or a NameConflict: a binder
        shadowing a visible name) is raised, located. Another compile error is left to a use
        that meets it (a temporal formula is neither a value nor an action, which says
        nothing about its names: the operands of its temporal operators are resolved on
        their own)."""
        self.resolving = True
        try:
            self._resolve_scopes()
        finally:
            self.resolving = False

    def _resolve_scopes(self) -> None:
        scopes, seen = [self.m.root_scope], set()
        while scopes:
            scope = scopes.pop()
            if id(scope) in seen:
                continue
            seen.add(id(scope))
            self._refuse_standard_clashes(scope)
            for d in list(scope.entries.values()):
                if not isinstance(d, OpDef):
                    continue
                if d.is_instance:
                    scopes.append(d.body)
                    continue
                _first_that_compiles(lambda: self.def_code(d, "value", "state", False, d.node),
                                     lambda: self.def_code(d, "action", "state", False, d.node))

    def _refuse_standard_clashes(self, scope: Scope) -> None:
        """A constant, variable or definition (of the module or one it extends) named as a
        standard module's operator that the module sees: SANY's multiply-defined symbol
        (`Len(s) == ...` under EXTENDS Sequences), at the declaration."""
        if scope.module is None:
            return
        for name, (_, loc) in scope.sites.items():
            if self._clashes_standard(scope.module, name):
                raise NameConflict(f"multiply-defined symbol {name}{_standard_home(name)}", loc)

    def _bind(self, ctx: Ctx, names, node) -> Ctx:
        """ctx with `names` bound by the binder `node` (a quantifier, CHOOSE, a set or
        function constructor or definition, LAMBDA), refusing a shadow as SANY does."""
        self._refuse_shadowing(ctx, names, node)
        return ctx.bind(*names)

    def _refuse_shadowing(self, ctx: Ctx, names, node) -> None:
        """SANY has no shadowing: a name bound or defined where another of that name is
        visible (bound around it, a LET name, or a module-level constant, variable or
        definition declared before it, in this file or a module it extends) is a
        multiply-defined symbol, located at the binder; so is one named as an operator of a
        standard module the module sees (`\\A Len \\in S` under EXTENDS Sequences). A
        module-level name declared after the binder is no conflict (it was not visible there)."""
        here = self.loc(node, ctx)
        for name in names:
            if any(b == name for b, _ in ctx.names) or any(lo.name == name for lo in ctx.localops):
                raise NameConflict(f"multiply-defined symbol {name} (bound already around it)", here)
            site = ctx.scope.sites.get(name)
            if site is None:
                continue
            loc = site[1]
            # (the scope merges a module with what it extends, and with what extends it: a
            # name of the extending module is not visible in the extended one's binders)
            visible = (loc.line, loc.col) < (here.line, here.col) if loc.file == here.file \
                else loc.file in self._extended_files(ctx.module or self.m.root)
            if visible:
                raise NameConflict(f"multiply-defined symbol {name} (also defined at {loc})", here)
        for name in names:
            if self._clashes_standard(ctx.module or self.m.root, name):
                raise NameConflict(f"multiply-defined symbol {name}{_standard_home(name)}", here)

    def _extended_files(self, mod: Module) -> frozenset[str]:
        """The files of the modules `mod` extends, transitively (whose names it sees)."""
        got = self._extends.get(mod.file)
        if got is None:
            files: set[str] = set()
            todo = [self.m.loader.get(e) for e in mod.extends]
            while todo:
                m = todo.pop()
                if m is not None and m.file not in files:
                    files.add(m.file)
                    todo.extend(self.m.loader.get(e) for e in m.extends)
            got = self._extends[mod.file] = frozenset(files)
        return got

    def _resolve_operand(self, node, ctx: Ctx) -> None:
        """(resolve_every_definition) The names in the operand of a temporal operator,
        which itself cannot be compiled: the operand as a value, else as an action."""
        _first_that_compiles(lambda: self.value(node, ctx), lambda: self.action(node, ctx))

    # ------------------------------------------------------------ name resolution
    def resolve(self, name: str, ctx: Ctx):
        for i in range(len(ctx.names) - 1, -1, -1):
            n, kind = ctx.names[i]
            if n == name:
                return ("local", i, kind)
        for lo in reversed(ctx.localops):
            if lo.name == name:
                return ("localop", lo)
        e = ctx.scope.entries.get(name)
        if e is not None:
            return e
        name = SYNONYMS.get(name, name)
        if name in MODULE_PROVIDED:
            seen = self._standard_names(ctx.module or self.m.root)
            if seen is not None and name not in seen:
                return None     # (a standard module's operator, that module not extended)
        if name in CONSTANTS:
            return ("stdconst", CONSTANTS[name])
        if name in BUILTINS:
            return ("builtin", BUILTINS[name])
        return None

    def _standard_names(self, mod: Module, passed: bool = False) -> frozenset | None:
        """The standard modules' operators and constants visible in `mod` (`passed`: those
        it passes on to a module that extends or instantiates it): what its EXTENDS and its
        unnamed INSTANCEs bring, transitively through user modules; a LOCAL INSTANCE's only
        in `mod` itself (SANY's rule: `LOCAL INSTANCE Naturals` in Sequences is why
        EXTENDS Sequences gives no `+`). None: every builtin (a community module's EXTENDS,
        whose names are not tabled, refuses nothing)."""
        key = (mod.file, mod.name, passed)
        table = self._std_names
        if key in table:
            return table[key]
        table[key] = frozenset()        # (a cycle of EXTENDS is refused elsewhere)
        seen: set = set()
        every = False
        brought = [(e, False) for e in mod.extends]
        brought += [(u.name, bool(u.local)) for u in mod.units if _name(u) == "Instance"]
        for other, local in brought:
            if local and passed:
                continue
            # (a file of the module's name in the search path is that module, as the loader
            # has it: a user's own TLC.tla declares its operators itself)
            um = self.m.loader.get(other)
            got = self._standard_names(um, passed=True) if um is not None else MODULE_NAMES.get(other)
            if got is None:
                every = True
            else:
                seen |= got
        out = table[key] = None if every else frozenset(seen)
        return out

    def _clashes_standard(self, mod: Module, name: str) -> bool:
        """`name` is a standard module's operator that `mod` sees (declaring or binding it
        there is a multiply-defined symbol); a module seeing every builtin (None) refuses
        nothing."""
        if name not in MODULE_PROVIDED:
            return False
        seen = self._standard_names(mod)
        return seen is not None and name in seen

    # ------------------------------------------------------------ value compilation
    def value(self, node, ctx: Ctx) -> tuple[Callable, int]:
        if isinstance(node, str):
            if node == "@":
                return self.resolve_at(node, ctx)
            raise self.err(f"unexpected token {node!r}", node, ctx)
        meth = getattr(self, "v_" + _name(node), None)
        if meth is None:
            raise self.err(f"unsupported construct {_name(node)}", node, ctx)
        fn, flags = meth(node, ctx)
        if _name(node) in _LOCATE:
            fn = self.wrap_errors(fn, node, ctx)
        return self.const_fold(fn, flags), flags

    def resolve_at(self, node, ctx):
        r = self.resolve("@", ctx)
        if r is None:
            raise self.err("@ used outside EXCEPT", node, ctx)
        i = r[1]
        return (lambda st, pr, env: env[i]), F_ENV

    def v_VerticalList(self, node, ctx):
        items = [it.expression for it in node.arguments]
        if node.operator in ("/\\", "\\land"):
            return self.sv_and(node, items, ctx)
        return self.sv_or(node, items, ctx)

    def v_Parentheses(self, node, ctx):
        return self.value(node.expression, ctx)

    def v_IntegralNumeral(self, node, ctx):
        v = int(node.value)
        return (lambda st, pr, env: v), 0

    def v_StringLiteral(self, node, ctx):
        raw = node.value
        v = _pyast.literal_eval(raw) if raw.startswith('"') else raw
        return (lambda st, pr, env: v), 0

    def v_BooleanLiteral(self, node, ctx):
        v = node.value == "TRUE"
        return (lambda st, pr, env: v), 0

    def v_SetOfBooleans(self, node, ctx):
        return (lambda st, pr, env: BOOLEAN), 0

    def v_SetOfStrings(self, node, ctx):
        return (lambda st, pr, env: STRING), 0

    def v_Tuple(self, node, ctx):
        items = [self.value(x, ctx) for x in node.items]
        fns = [f for f, _ in items]
        flags = _or(items)
        if len(fns) == 2:
            a, b = fns
            return (lambda st, pr, env: (a(st, pr, env), b(st, pr, env))), flags
        return (lambda st, pr, env: tuple(f(st, pr, env) for f in fns)), flags

    def v_SetEnumeration(self, node, ctx):
        items = [self.value(x, ctx) for x in node.items]
        fns = [f for f, _ in items]
        loc = self.loc(node, ctx)

        def set_enum(st, pr, env):
            try:
                return set_of([normalize(f(st, pr, env)) for f in fns])
            except EvalError as e:
                if e.loc is None:
                    e.loc = loc
                raise
        return set_enum, _or(items)

    def v_Record(self, node, ctx):
        items = [(kv[0] if isinstance(kv, (list, tuple)) else kv.name,
                  self.value(kv[1] if isinstance(kv, (list, tuple)) else kv.expression, ctx))
                 for kv in node.key_values]
        keys = [k for k, _ in items]
        fns = [f for _, (f, _) in items]
        flags = _or([c for _, c in items])
        return (lambda st, pr, env: Fcn({k: f(st, pr, env) for k, f in zip(keys, fns)}, 0)), flags

    def v_SetOfRecords(self, node, ctx):
        items = [(kb.name, self.value(kb.bound, ctx)) for kb in node.key_bounds]
        flags = _or([c for _, c in items])
        return (lambda st, pr, env: RecordSet({k: f(st, pr, env) for k, (f, _) in items})), flags

    def v_SetOfFunctions(self, node, ctx):
        d, df = self.value(node.domain, ctx)
        r, rf = self.value(node.codomain, ctx)
        return (lambda st, pr, env: FcnSet(d(st, pr, env), r(st, pr, env))), df | rf

    def v_Field(self, node, ctx):
        f, flags = self.value(node.expression, ctx)
        key = node.name
        loc = self.loc(node, ctx)

        def field(st, pr, env):
            r = f(st, pr, env)
            if type(r) is Fcn:
                try:
                    return r.d[key]
                except KeyError:
                    pass
            raise EvalError(f"record {fmt(r)} has no field {key}", loc)
        return field, flags

    def v_FunctionApplication(self, node, ctx):
        f, ff = self.value(node.function, ctx)
        args = [self.value(a, ctx) for a in node.arguments]
        flags = ff | _or(args)
        loc = self.loc(node, ctx)
        if len(args) == 1:
            a = args[0][0]

            def app(st, pr, env):
                fv = f(st, pr, env)
                x = a(st, pr, env)
                t = type(fv)
                if t is Fcn:
                    v = fv.d.get(x, _MISS)
                    if v is not _MISS:
                        # the key found is of x's own types (else apply_fn checks it): an
                        # integer other than 0 and 1, a name, or f has no boolean key and x
                        # (0, 1, or a tuple of them, f[a, b]) holds no boolean
                        tx = type(x)
                        if tx is int:
                            if x > 1 or x < 0:
                                return v
                            kk = fv.kk
                            if kk is None:
                                kk = key_kinds(fv)
                            if not kk & KK_BOOL:
                                return v
                        elif tx is tuple:
                            kk = fv.kk
                            if kk is None:
                                kk = key_kinds(fv)
                            if not kk & _KK_BOOL_NESTED:
                                if len(x) == 2:
                                    if type(x[0]) is not bool and type(x[1]) is not bool:
                                        return v
                                elif bool not in map(type, x):
                                    return v
                        elif tx is str or tx is ModelValue:
                            return v
                elif t is tuple and type(x) is int and 0 < x <= len(fv):
                    return fv[x - 1]
                return apply_fn(fv, x, loc)
            return app, flags
        afns = [x for x, _ in args]
        return (lambda st, pr, env: apply_fn(f(st, pr, env), tuple(x(st, pr, env) for x in afns), loc)), flags

    def v_If(self, node, ctx):
        return self.if_then_else(node, ctx, self.value)

    def if_then_else(self, node, ctx, branch):
        """IF as a value (branch=self.value) or as an action (branch=self.action): the
        condition is always a value, and only the taken branch is evaluated."""
        c, cf = self.value(node.predicate, ctx)
        t, tf = branch(node.then, ctx)
        e, ef = branch(node.else_, ctx)
        loc = self.loc(node.predicate, ctx)

        def if_(st, pr, env):
            v = c(st, pr, env)
            if v is True:
                return t(st, pr, env)
            if v is False:
                return e(st, pr, env)
            raise EvalError(f"IF condition is {fmt(v)}, not a boolean", loc)
        return if_, cf | tf | ef

    def v_Cases(self, node, ctx):
        arms = [(self.value(ci.predicate, ctx), self.value(ci.expression, ctx)) for ci in node.cases]
        other = self.value(node.other, ctx) if node.other is not None else None
        flags = _or([p for p, _ in arms] + [e for _, e in arms] + ([other] if other else []))
        loc = self.loc(node, ctx)

        def case(st, pr, env):
            for (p, _), (e, _) in arms:
                v = p(st, pr, env)
                if v is True:
                    return e(st, pr, env)
                if v is not False:
                    raise EvalError(f"CASE guard is {fmt(v)}, not a boolean", loc)
            if other is not None:
                return other[0](st, pr, env)
            raise EvalError("no CASE arm applies and there is no OTHER", loc)
        return case, flags

    def v_Let(self, node, ctx):
        inner, pushes = self.let_ctx(node, ctx)
        body, bflags = self.value(node.expression, inner)
        return self.let_wrap(pushes, body), _let_flags(pushes, bflags)

    def let_ctx(self, node, ctx: Ctx):
        """Bind LET definitions: zero-arity ones become lazy env slots, others LocalOps."""
        pushes = []
        cur = ctx
        for d in node.definitions:
            if _name(d) != "OperatorDefinition":
                continue  # RECURSIVE declarations inside LET
            params = [(p.operator, len(p.arguments) if p.arguments else 0) if _name(p) == "OperatorApplication"
                      else (str(p), 0) for p in (d.arity or [])]
            self._refuse_shadowing(cur, [d.name], d)
            if params:
                lo = LocalOp(d.name, params, d.definiens, len(cur.names), cur.names)
                cur = Ctx(cur.scope, cur.names, cur.localops + (lo,), cur.varmode, cur.primed, cur.module)
                lo_ctx = cur
                lo.cache["ctx"] = lo_ctx
            else:
                if d.function:
                    # recursive function: its own slot is visible in its body
                    bctx = cur.bind(d.name, kind="val")
                    code, flags = self.let_recfn(d, bctx)
                    pushes.append(("recfn", code, flags))
                    cur = bctx
                else:
                    code, flags = self.value(d.definiens, cur)
                    pushes.append(("lazy", code, flags))
                    cur = cur.bind(d.name, kind="lazy")
        return cur, pushes

    def let_recfn(self, d, bctx: Ctx):
        bounds = self.bounds(d.definiens.declaration, bctx)
        if len(bounds) != 1 or not isinstance(bounds[0][0], str):
            raise self.err("LET function definitions take one bound variable", d, bctx)
        pat, set_node = bounds[0]
        set_fn, sf = self.value(set_node, bctx)
        body_fn, bf = self.value(d.definiens.value, self._bind(bctx, [pat], d))

        def make(st, pr, env):
            # env here already ends with this function's own slot (filled below)
            f = RecFcn(None, None)
            env2 = env[:-1] + (f,)
            f.dom = set_fn(st, pr, env2)
            f.body = lambda x: body_fn(st, pr, env2 + (x,))
            return f, env2
        return make, sf | bf

    def let_wrap(self, pushes, body):
        if not pushes:
            return body

        def let(st, pr, env):
            for kind, code, _ in pushes:
                if kind == "lazy":
                    env = env + (Lazy(code, st, pr, env),)
                else:
                    _, env = code(st, pr, env + (None,))
            return body(st, pr, env)
        return let

    def v_Lambda(self, node, ctx):
        names = [p.operator if _name(p) == "OperatorApplication" else str(p) for p in node.parameters]
        body, flags = self.value(node.expression, self._bind(ctx, names, node))
        n = len(names)
        return (lambda st, pr, env: Closure(lambda *a: body(st, pr, env + a), n)), flags | F_ENV

    def v_Choose(self, node, ctx):
        decl = node.declaration
        if _name(decl) == "OperatorApplication" and decl.operator == "\\in":
            pat, set_node = decl.arguments
            s, sf = self.value(set_node, ctx)
        else:
            raise self.err("unbounded CHOOSE cannot be evaluated", node, ctx)
        name = self.pattern(pat, ctx)
        p, pf = self.value(node.predicate, self._bind(ctx, _pat_names(name), node))
        loc = self.loc(node, ctx)
        bind = _binder(name)

        def choose(st, pr, env):
            S = s(st, pr, env)
            for x in sorted_values(S):
                v = p(st, pr, bind(env, x))
                if v is True:
                    return x
                if v is not False:
                    raise EvalError(f"CHOOSE predicate is {fmt(v)}, not a boolean", loc)
            raise EvalError(f"CHOOSE found no element of {fmt(S)} satisfying the predicate", loc)
        return choose, sf | (pf & ~F_ENV) | (pf & F_ENV and _outer_env(pf, ctx))

    def v_Quantification(self, node, ctx):
        bounds = self.bounds(node.declarations, ctx)
        names = [n for pat, _ in bounds for n in _pat_names(pat)]
        body, bf = self.value(node.predicate, self._bind(ctx, names, node))
        sets = self.bound_sets(bounds, ctx)
        flags = _or([(0, f) for _, f in sets]) | (bf & ~F_ENV) | (F_ENV if _uses_outer(bf, ctx) else 0)
        loc = self.loc(node, ctx)
        is_all = node.quantifier == "\\A"
        if len(bounds) == 1 and isinstance(bounds[0][0], str):
            sfn = sets[0][0]

            if is_all:
                def forall(st, pr, env):
                    for x in iter_values(sfn(st, pr, env)):
                        v = body(st, pr, env + (x,))
                        if v is not True:
                            if v is False:
                                return False
                            raise EvalError(f"\\A body is {fmt(v)}, not a boolean", loc)
                    return True
                return forall, flags

            def exists(st, pr, env):
                for x in iter_values(sfn(st, pr, env)):
                    v = body(st, pr, env + (x,))
                    if v is True:
                        return True
                    if v is not False:
                        raise EvalError(f"\\E body is {fmt(v)}, not a boolean", loc)
                return False
            return exists, flags

        def quant(st, pr, env):
            for env2 in self.iter_bind(bounds, sets, st, pr, env):
                v = body(st, pr, env2)
                if v is not (not is_all):
                    if v is is_all:
                        continue
                    raise EvalError(f"quantifier body is {fmt(v)}, not a boolean", loc)
                return not is_all
            return is_all
        return quant, flags

    def v_SetSlice(self, node, ctx):
        decl = node.declaration
        pat, set_node = decl.arguments
        name = self.pattern(pat, ctx)
        s, sf = self.value(set_node, ctx)
        p, pf = self.value(node.predicate, self._bind(ctx, _pat_names(name), node))
        bind = _binder(name)
        loc = self.loc(node, ctx)

        def slice_(st, pr, env):
            out = []
            for x in iter_values(s(st, pr, env)):
                v = p(st, pr, bind(env, x))
                if v is True:
                    out.append(x)
                elif v is not False:
                    raise EvalError(f"set filter predicate is {fmt(v)}, not a boolean", loc)
            return frozenset(out)
        return slice_, sf | (pf & ~F_ENV) | (F_ENV if _uses_outer(pf, ctx) else 0)

    def v_SetComprehension(self, node, ctx):
        bounds = self.bounds(node.declarations, ctx)
        names = [n for pat, _ in bounds for n in _pat_names(pat)]
        e, ef = self.value(node.item, self._bind(ctx, names, node))
        sets = self.bound_sets(bounds, ctx)
        flags = _or([(0, f) for _, f in sets]) | (ef & ~F_ENV) | (F_ENV if _uses_outer(ef, ctx) else 0)
        if len(bounds) == 1 and isinstance(bounds[0][0], str):
            sfn = sets[0][0]
            return (lambda st, pr, env: set_of([normalize(e(st, pr, env + (x,)))
                                                for x in iter_values(sfn(st, pr, env))])), flags
        return (lambda st, pr, env: set_of([normalize(e(st, pr, env2))
                                            for env2 in self.iter_bind(bounds, sets, st, pr, env)])), flags

    def v_Function(self, node, ctx):
        bounds = self.bounds(node.declaration, ctx)
        names = [n for pat, _ in bounds for n in _pat_names(pat)]
        e, ef = self.value(node.value, self._bind(ctx, names, node))
        sets = self.bound_sets(bounds, ctx)
        flags = _or([(0, f) for _, f in sets]) | (ef & ~F_ENV) | (F_ENV if _uses_outer(ef, ctx) else 0)
        if len(bounds) == 1 and isinstance(bounds[0][0], str):
            sfn = sets[0][0]

            def fcn1(st, pr, env):
                dom = sfn(st, pr, env)
                if is_infinite(dom):
                    # [n \in Nat |-> e]: evaluated where applied, as TLC does (a function over an
                    # infinite domain can be applied, not enumerated)
                    return RecFcn(dom, lambda x: e(st, pr, env + (x,)))
                return mk_fcn({x: e(st, pr, env + (x,)) for x in iter_values(dom)})
            return fcn1, flags
        n0 = len(ctx.names)

        def fcn(st, pr, env):
            d = {}
            for env2 in self.iter_bind(bounds, sets, st, pr, env):
                key = env2[n0:] if len(env2) - n0 > 1 else env2[n0]
                d[key] = e(st, pr, env2)
            return mk_fcn(d)
        return fcn, flags

    def v_Except(self, node, ctx):
        f, ff = self.value(node.function, ctx)
        changes = []
        flags = ff
        at_ctx = ctx.bind("@")
        for ch in node.changes:
            path = []
            for sel in ch.item:
                if isinstance(sel, str):
                    path.append(("field", sel))
                else:
                    comp = [self.value(a, ctx) for a in sel]
                    flags |= _or(comp)
                    path.append(("apply", [c for c, _ in comp]))
            e, ef = self.value(ch.expression, at_ctx)
            flags |= (ef & ~F_ENV) | (F_ENV if _uses_outer(ef, ctx) else 0)
            changes.append((path, e))
        loc = self.loc(node, ctx)

        def except_(st, pr, env):
            val = f(st, pr, env)
            for path, e in changes:
                keys = []
                for kind, x in path:
                    if kind == "field":
                        keys.append(x)
                    elif len(x) == 1:
                        keys.append(x[0](st, pr, env))
                    else:
                        keys.append(tuple(c(st, pr, env) for c in x))
                val = update_path(val, keys, lambda old: e(st, pr, env + (old,)), loc)
            return val
        return except_, flags

    def v_SubscriptedAction(self, node, ctx):
        # [A]_v as a value (in a PROPERTY): A \/ v' = v ; <<A>>_v: A /\ v' # v
        a, af = self.value(node.action, ctx)
        v, vf = self.value(node.subscript, ctx)
        vp, _ = self.value(node.subscript, Ctx(ctx.scope, ctx.names, ctx.localops, ctx.varmode, True, ctx.module))
        loc = self.loc(node, ctx)
        if node.operator == "[":
            return (lambda st, pr, env: a(st, pr, env) is True
                    or _eq(vp(st, pr, env), v(st, pr, env), loc)), af | vf | F_STATE
        return (lambda st, pr, env: a(st, pr, env) is True
                and not _eq(vp(st, pr, env), v(st, pr, env), loc)), af | vf | F_STATE

    def v_SubexpressionReference(self, node, ctx):
        return self.instance_ref(node, ctx, "value")

    def v_Fairness(self, node, ctx):
        if self.resolving:
            self._resolve_operand(node.subscript, ctx)
            self._resolve_operand(node.action, ctx)
        raise self.err("fairness conditions are temporal formulas; they cannot be evaluated as values", node, ctx,
                       TemporalInPart)

    def v_OperatorApplication(self, node, ctx):
        op = node.operator
        args = node.arguments or []
        if isinstance(op, str):
            op = SYNONYMS.get(op, op)
            special = _SPECIAL_VALUE.get(op)
            if special is not None:
                return getattr(self, special)(node, args, ctx)
        return self.apply_named(node, op, args, ctx, "value")

    # ---------------------------------------------------- special value operators
    def sv_and(self, node, args, ctx):
        parts = [self.value(a, ctx) for a in args]
        fns = [f for f, _ in parts]
        locs = [self.loc(a, ctx) for a in args]

        def and_(st, pr, env):
            for f, loc in zip(fns, locs):
                v = f(st, pr, env)
                if v is not True:
                    if v is False:
                        return False
                    raise EvalError(f"/\\ applied to non-boolean {fmt(v)}", loc)
            return True
        return and_, _or(parts)

    def sv_or(self, node, args, ctx):
        parts = [self.value(a, ctx) for a in args]
        fns = [f for f, _ in parts]
        locs = [self.loc(a, ctx) for a in args]

        def or_(st, pr, env):
            for f, loc in zip(fns, locs):
                v = f(st, pr, env)
                if v is not False:
                    if v is True:
                        return True
                    raise EvalError(f"\\/ applied to non-boolean {fmt(v)}", loc)
            return False
        return or_, _or(parts)

    def sv_not(self, node, args, ctx):
        a, af = self.value(args[0], ctx)
        loc = self.loc(node, ctx)

        def not_(st, pr, env):
            v = a(st, pr, env)
            if v is True or v is False:
                return not v
            raise EvalError(f"~ applied to non-boolean {fmt(v)}", loc)
        return not_, af

    def sv_implies(self, node, args, ctx):
        a, af = self.value(args[0], ctx)
        b, bf = self.value(args[1], ctx)
        loc = self.loc(node, ctx)

        def implies(st, pr, env):
            v = a(st, pr, env)
            if v is False:
                return True
            if v is True:
                w = b(st, pr, env)
                if w is True or w is False:
                    return w
                v = w
            raise EvalError(f"=> applied to non-boolean {fmt(v)}", loc)
        return implies, af | bf

    def sv_equiv(self, node, args, ctx):
        a, af = self.value(args[0], ctx)
        b, bf = self.value(args[1], ctx)
        return (lambda st, pr, env: _bool(a(st, pr, env)) == _bool(b(st, pr, env))), af | bf

    def sv_eq(self, node, args, ctx):
        return self._compare(node, args, ctx, operator.eq)

    def sv_neq(self, node, args, ctx):
        return self._compare(node, args, ctx, operator.ne)

    def _compare(self, node, args, ctx, op):
        """= or #: values of different kinds are an error, as in TLC (never FALSE, nor TRUE:
        Python's 1 == True), and so is a boolean paired with an integer inside equal values
        (`<<1>> = <<TRUE>>`: `crossing`); a model value compares with anything."""
        a, af = self.value(args[0], ctx)
        b, bf = self.value(args[1], ctx)
        loc = self.loc(node, ctx)
        eq = op is operator.eq

        def decide(x, y):
            t = type(x)
            if t is not type(y):
                why = kinds_differ(x, y)
                if why is not None:
                    raise EvalError(why, loc)
            if x == y:
                if t in _CONTAINERS and x is not y and not (t is tuple and all(map(_is, x, y))):
                    r = crossing(x, y)
                    if r is not None:
                        raise EvalError(crossing_error(r, x, y), loc)
                return eq
            return not eq

        parts = self._one_key_except(args[1], ctx)
        if parts is None:
            return (lambda st, pr, env: decide(a(st, pr, env), b(st, pr, env))), af | bf
        fb, kb, eb = parts

        def compare_except(st, pr, env):
            """x = [f EXCEPT ![k] = e] without building the right side when x differs from
            it at k (the step checks of `hicache explain` test an action's `v' = [v EXCEPT
            ...]` for every binding of its quantifiers, nearly all of which differ there):
            the same evaluations in the same order (x, f, k, then e with @ = f[k]) and the
            same verdict, since functions that differ at one argument are unequal; any case
            it does not cover (a key outside the domain, a boolean paired with an integer
            in f's keys, a lazy function, values at k whose comparison raises: the general
            one compares the arguments in order and may stop before k) is left to the
            general comparison."""
            x = a(st, pr, env)
            f = fb(st, pr, env)
            t = type(x)
            if t is type(f):
                if t is tuple:
                    k = kb(st, pr, env)
                    if type(k) is int and 1 <= k <= len(f):
                        new = eb(st, pr, env + (f[k - 1],))
                        if len(x) != len(f) or _differ(x[k - 1], new):
                            return not eq
                elif t is Fcn:
                    k = kb(st, pr, env)
                    try:
                        inside = k in f.d
                    except TypeError:        # (an unhashable key: in no domain)
                        inside = False
                    if inside and fcn_key_ok(f, k):
                        new = eb(st, pr, env + (f.d[k],))
                        if _differ(x.d.get(k, _NOTHING), new):
                            return not eq
            # (x may equal the right side: it is built by EXCEPT's own code, its arguments
            # evaluated again; pure, and rare in a step test)
            return decide(x, b(st, pr, env))
        return compare_except, af | bf

    def _one_key_except(self, node, ctx):
        """(f, k, e) compiled, for `[f EXCEPT ![k] = e]` with one change at one key; None for
        any other expression."""
        if _name(node) != "Except" or len(node.changes) != 1:
            return None
        ch = node.changes[0]
        if len(ch.item) != 1 or isinstance(ch.item[0], str) or len(ch.item[0]) != 1:
            return None
        return (self.value(node.function, ctx)[0], self.value(ch.item[0][0], ctx)[0],
                self.value(ch.expression, ctx.bind("@"))[0])

    def sv_in(self, node, args, ctx):
        a, af = self.value(args[0], ctx)
        b, bf = self.value(args[1], ctx)
        loc = self.loc(node, ctx)

        def in_(st, pr, env):
            s = b(st, pr, env)
            try:
                if type(s) is frozenset:
                    x = a(st, pr, env)
                    if x not in s:
                        return False
                    t = type(x)
                    # (the member found is of x's own type; else set_has looks at it)
                    if t is str or t is ModelValue or (t is int and (x > 1 or x < 0)):
                        return True
                    return set_has(x, s)
                if isinstance(s, LazySet):
                    return s.contains(a(st, pr, env))
            except EvalError as e:
                if e.loc is None:
                    e.loc = loc
                raise
            raise EvalError(f"\\in applied to non-set {fmt(s)}", loc)
        return in_, af | bf

    def sv_notin(self, node, args, ctx):
        f, flags = self.sv_in(node, args, ctx)
        return (lambda st, pr, env: not f(st, pr, env)), flags

    def sv_prime(self, node, args, ctx):
        if ctx.primed:
            raise self.err("double prime", node, ctx)
        inner = Ctx(ctx.scope, ctx.names, ctx.localops, ctx.varmode, True, ctx.module)
        f, flags = self.value(args[0], inner)
        return f, flags | F_STATE

    def sv_unchanged(self, node, args, ctx):
        # UNCHANGED e as a value: e' = e
        inner = Ctx(ctx.scope, ctx.names, ctx.localops, ctx.varmode, True, ctx.module)
        a, af = self.value(args[0], inner)
        b, bf = self.value(args[0], ctx)
        loc = self.loc(node, ctx)
        return (lambda st, pr, env: _eq(a(st, pr, env), b(st, pr, env), loc)), af | bf | F_STATE

    def sv_enabled(self, node, args, ctx):
        act, af = self.action(args[0], ctx)
        n = len(self.m.variables)

        def enabled(st, pr, env):
            return bool(act(st, [UNSET] * n, env))
        return enabled, af | F_STATE

    def sv_box(self, node, args, ctx):
        if ctx.varmode == "prop":
            # a [] the checker did not take apart (under IF, LET, ~, =>, ...): evaluating it on
            # the one state or step at hand would check it there only (a false pass)
            raise self.err("temporal operator [] cannot be evaluated on a state", node, ctx, TemporalInPart)
        # ([]P or [][A]_v named as an INVARIANT: P, [A]_v evaluated on every state)
        return self.value(args[0], ctx)

    def sv_temporal(self, node, args, ctx):
        if self.resolving:
            for a in args:
                self._resolve_operand(a, ctx)
        raise self.err(f"temporal operator {node.operator} cannot be evaluated on a state", node, ctx,
                       TemporalInPart)

    # ---------------------------------------------------- named operators
    def apply_named(self, node, op: str, args, ctx: Ctx, kind: str):
        if op == "-" and len(args) == 1:
            op = "-."
        r = self.resolve(op, ctx)
        if r is None:
            raise self.err(f"unknown operator {op}{_extends_hint(op)}", node, ctx, UnknownName)
        if isinstance(r, tuple):
            tag = r[0]
            if tag == "local":
                i, lkind = r[1], r[2]
                if lkind == "lazy":
                    return (lambda st, pr, env: env[i].force(pr)), F_ENV
                if lkind == "op":
                    argc = [self.arg_value(a, ctx, 0) for a in args]
                    fns = [f for f, _ in argc]
                    return (lambda st, pr, env: env[i](*[f(st, pr, env) for f in fns])), F_ENV | _or(argc) | F_STATE
                if args:
                    raise self.err(f"{op} is not an operator", node, ctx)
                return (lambda st, pr, env: env[i]), F_ENV
            if tag == "var":
                if args:
                    raise self.err(f"variable {op} applied to arguments", node, ctx)
                return self.var_ref(r[1], op, node, ctx), F_STATE
            if tag == "const":
                return self.const_ref(r, node, args, ctx)
            if tag == "stdconst":
                v = r[1]
                return (lambda st, pr, env: v), 0
            if tag == "builtin":
                return self.builtin_call(node, r[1], args, ctx)
            if tag == "localop":
                return self.localop_call(node, r[1], args, ctx, kind)
        if isinstance(r, Subst):
            return self.subst_ref(r, ctx, kind)
        if isinstance(r, OpDef):
            return self.def_call(node, r, args, ctx, kind)
        raise self.err(f"cannot apply {op}", node, ctx)

    def var_ref(self, i: int, name: str, node, ctx: Ctx):
        if ctx.primed or ctx.varmode == "init":
            loc = self.loc(node, ctx)
            what = f"{name}'" if ctx.primed else name

            def primed(st, pr, env):
                if pr is None:
                    # a state predicate (an invariant, a constraint, a view) sees one state:
                    # TLC refuses it at level checking; here it fails at the read, located
                    raise EvalError(f"{what}: a primed variable in an expression evaluated on one state "
                                    f"(an invariant, constraint or view must be a state predicate)", loc)
                v = pr[i]
                if v is UNSET:
                    raise EvalError(f"{what} is read before it is assigned", loc)
                return v
            return primed
        return lambda st, pr, env: st[i]

    def const_ref(self, r, node, args, ctx):
        _, name, arity, decl, mod = r
        if name in self.m.overrides:
            target = self.m.overrides[name]
            d = self.m.root_scope.entries.get(target)
            if not isinstance(d, OpDef):
                raise self.err(f"configuration substitutes {name} <- {target}, but {target} is not defined", node, ctx)
            return self.def_call(node, d, args, ctx, "value")
        if name not in self.m.const_values:
            missing = SemanticError(f"constant {name} is not given a value by the configuration",
                                    node_loc(mod.file, decl))
            if not self.resolving:
                raise missing

            def unbound(st, pr, env):       # (prove without a .cfg: the names still resolve)
                raise missing
            return unbound, 0
        v = self.m.const_values[name]
        if args:
            raise self.err(f"constant {name} applied to arguments", node, ctx)
        return (lambda st, pr, env: v), 0

    def subst_ref(self, s: Subst, ctx: Ctx, kind: str):
        # compile the substituting expression in its own (instantiating) context, keeping
        # this reference's priming and variable mode
        sctx = Ctx(s.ctx.scope, s.ctx.names, s.ctx.localops, ctx.varmode, ctx.primed, s.ctx.module)
        code, flags = self.action(s.expr, sctx) if kind == "action" else self.value(s.expr, sctx)
        n = len(s.ctx.names)
        if n == 0:
            return (lambda st, pr, env: code(st, pr, ())), flags & ~F_ENV
        # instance parameters live at the start of env (see instance_ref)
        return (lambda st, pr, env: code(st, pr, env[:n])), flags

    def arg_value(self, a, ctx, arity):
        """Compile an operator argument; operator parameters become Closure values."""
        if arity == 0:
            return self.value(a, ctx)
        if _name(a) == "Lambda":
            return self.value(a, ctx)
        if _name(a) == "OperatorApplication" and not a.arguments:
            name = SYNONYMS.get(a.operator, a.operator)
            r = self.resolve(name, ctx)
            if isinstance(r, OpDef):
                code, flags = self.def_code(r, "value", ctx.varmode, ctx.primed, a)
                return (lambda st, pr, env: Closure(lambda *x: code(st, pr, x), arity, name)), flags | F_STATE
            if isinstance(r, tuple) and r[0] == "builtin":
                b = r[1]
                return (lambda st, pr, env: Closure(b.impl, arity, name)), 0
            if isinstance(r, tuple) and r[0] == "local" and r[2] == "op":
                i = r[1]
                return (lambda st, pr, env: env[i]), F_ENV
            if isinstance(r, tuple) and r[0] == "localop":
                lo = r[1]
                body = self.localop_body(lo, ctx, "value")
                p = lo.prefix
                return (lambda st, pr, env: Closure(lambda *x: body(st, pr, env[:p] + x), arity, name)), F_ENV | F_STATE
        if isinstance(a, str) and a in BUILTINS or (isinstance(a, str) and SYNONYMS.get(a, a) in BUILTINS):
            b = BUILTINS[SYNONYMS.get(a, a)]
            return (lambda st, pr, env: Closure(b.impl, arity, a)), 0
        raise self.err("expected an operator argument", a, ctx)

    def builtin_call(self, node, b, args, ctx):
        if b.arity >= 0 and len(args) != b.arity:
            raise self.err(f"{b.name} takes {b.arity} arguments, got {len(args)}", node, ctx)
        comp = [self.arg_value(a, ctx, 1 if i in b.op_params else 0) for i, a in enumerate(args)]
        fns = [f for f, _ in comp]
        flags = _or(comp) | (F_IMPURE if b.impure else 0)
        impl = b.impl
        loc = self.loc(node, ctx)
        name = b.name
        if len(fns) == 2:
            f0, f1 = fns

            def call2(st, pr, env):
                try:
                    return impl(f0(st, pr, env), f1(st, pr, env))
                except EvalError as e:
                    if e.loc is None:
                        e.loc = loc
                    raise
                except (TypeError, AttributeError) as e:
                    raise EvalError(f"{name}: {e}", loc) from None
            return call2, flags

        def call(st, pr, env):
            try:
                return impl(*[f(st, pr, env) for f in fns])
            except EvalError as e:
                if e.loc is None:
                    e.loc = loc
                raise
            except (TypeError, AttributeError) as e:
                raise EvalError(f"{name}: {e}", loc) from None
        return call, flags

    def def_call(self, node, d: OpDef, args, ctx: Ctx, kind: str):
        if d.is_instance:
            raise self.err(f"{d.name} is an instance; use {d.name}!Op", node, ctx)
        if len(args) != len(d.params):
            raise self.err(f"{d.name} takes {len(d.params)} arguments, got {len(args)}", node, ctx)
        n_inst = _instance_args(ctx)
        if n_inst:
            # inside a parameterized instance's body (env starts with its n arguments): a
            # definition of the instantiated module sees them too, its substitutions read them
            # (`subst_ref`: env[:n]); called with () it lost them (an internal IndexError)
            code, flags = self._instance_body(d, ctx, kind, n_inst)
            comp = [self.arg_value(a, ctx, ar) for a, (_, ar) in zip(args, d.params)]
            fns = [f for f, _ in comp]
            return (lambda st, pr, env: code(st, pr, env[:n_inst] + tuple(f(st, pr, env) for f in fns))), \
                flags | F_ENV | _or(comp)
        code, flags = self.def_code(d, kind, ctx.varmode, ctx.primed, node)
        if not args:
            # a definition sees only its own bound names: never the caller's env
            if not ctx.names:
                return code, flags
            return (lambda st, pr, env: code(st, pr, ())), flags
        comp = [self.arg_value(a, ctx, ar) for a, (_, ar) in zip(args, d.params)]
        fns = [f for f, _ in comp]
        aflags = _or(comp)
        if len(fns) == 1:
            f0 = fns[0]
            return (lambda st, pr, env: code(st, pr, (f0(st, pr, env),))), flags | aflags
        return (lambda st, pr, env: code(st, pr, tuple(f(st, pr, env) for f in fns))), flags | aflags

    def localop_body(self, lo: LocalOp, ctx: Ctx, kind: str):
        key = (kind, ctx.varmode, ctx.primed)
        if key in lo.cache:
            return lo.cache[key]
        defctx = lo.cache["ctx"]
        bctx = Ctx(defctx.scope, lo.names + tuple((p, "op" if a else "val") for p, a in lo.params),
                   defctx.localops, ctx.varmode, ctx.primed, defctx.module)
        cell: list = []
        lo.cache[key] = lambda st, pr, env: cell[0](st, pr, env)  # allows recursion
        code, _ = self.action(lo.body, bctx) if kind == "action" else self.value(lo.body, bctx)
        cell.append(code)
        lo.cache[key] = code
        return code

    def localop_call(self, node, lo: LocalOp, args, ctx, kind):
        if len(args) != len(lo.params):
            raise self.err(f"{lo.name} takes {len(lo.params)} arguments, got {len(args)}", node, ctx)
        body = self.localop_body(lo, ctx, kind)
        comp = [self.arg_value(a, ctx, ar) for a, (_, ar) in zip(args, lo.params)]
        fns = [f for f, _ in comp]
        p = lo.prefix
        return (lambda st, pr, env: body(st, pr, env[:p] + tuple(f(st, pr, env) for f in fns))), \
            F_ENV | F_STATE | _or(comp)

    def instance_ref(self, node, ctx: Ctx, kind: str):
        items = node.items
        first = items[0]
        name = first.operator if _name(first) == "OperatorApplication" else str(first)
        iargs = (first.arguments or []) if _name(first) == "OperatorApplication" else []
        d = self.resolve(name, ctx)
        if d is None:
            raise self.err(f"unknown operator {name}", node, ctx, UnknownName)
        if not isinstance(d, OpDef) or not d.is_instance:
            raise self.err(f"{name} is not an instance", node, ctx)
        arg_comp = [self.value(a, ctx) for a in iargs]
        scope = d.body
        for it in items[1:-1]:
            nm = it.operator if _name(it) == "OperatorApplication" else str(it)
            nd = scope.entries.get(nm)
            if not isinstance(nd, OpDef) or not nd.is_instance:
                raise self.err(f"{nm} is not an instance", node, ctx)
            scope = nd.body
        last = items[-1]
        opname = last.operator if _name(last) == "OperatorApplication" else str(last)
        oargs = (last.arguments or []) if _name(last) == "OperatorApplication" else []
        target = scope.entries.get(opname)
        if target is None:
            if opname in BUILTINS or opname in CONSTANTS:
                return self.apply_named(last, opname, oargs, ctx, kind)
            raise self.err(f"{name}!{opname} is not defined", node, ctx, UnknownName)
        if isinstance(target, Subst):
            code, flags = self.subst_ref(target, ctx, kind)
        else:
            if len(oargs) != len(target.params):
                raise self.err(f"{opname} takes {len(target.params)} arguments, got {len(oargs)}", node, ctx)
            tctx = Ctx(target.scope, tuple(("$i", "val") for _ in iargs), (), ctx.varmode, ctx.primed, target.module)
            code, flags = self._instance_body(target, tctx, kind, len(iargs))
        comp = arg_comp + [self.arg_value(a, ctx, ar) for a, (_, ar) in
                           zip(oargs, getattr(target, "params", []))]
        fns = [f for f, _ in comp]
        if not fns:
            return code, flags
        return (lambda st, pr, env: code(st, pr, tuple(f(st, pr, env) for f in fns))), flags | _or(comp)

    def _instance_body(self, d: OpDef, tctx: Ctx, kind: str, n_inst: int):
        key = (kind, tctx.varmode, tctx.primed, "inst", n_inst)
        if key in d.cache:
            return d.cache[key]
        if n_inst == 0:
            res = self.def_code(d, kind, tctx.varmode, tctx.primed, d.node)
        else:
            # parameterized instance: env = instance args + operator args
            ctx = Ctx(d.scope, tuple(("$i", "val") for _ in range(n_inst))
                      + tuple((p, "op" if a else "val") for p, a in d.params),
                      (), tctx.varmode, tctx.primed, d.module)
            res = self.action(d.body, ctx) if kind == "action" else self.value(d.body, ctx)
        d.cache[key] = res
        return res

    # ------------------------------------------------------------ binders
    def pattern(self, pat, ctx):
        if _name(pat) == "Tuple":
            return tuple(self.pattern(p, ctx) for p in pat.items)
        if _name(pat) == "OperatorApplication" and not pat.arguments:
            return pat.operator
        raise self.err("expected a bound variable or a tuple of them", pat, ctx)

    def bounds(self, decls, ctx):
        """[(pattern, set_node)] from `x, y \\in S, <<a, b>> \\in T` declarations."""
        out = []
        pending = []
        for d in decls:
            if _name(d) == "OperatorApplication" and d.operator == "\\in" and d.arguments:
                pat = self.pattern(d.arguments[0], ctx)
                for p in pending:
                    out.append((p, d.arguments[1]))
                pending = []
                out.append((pat, d.arguments[1]))
            else:
                pending.append(self.pattern(d, ctx))
        if pending:
            raise self.err("unbounded quantifier cannot be evaluated", decls[0], ctx)
        return out

    def bound_sets(self, bounds, ctx):
        # Sets are evaluated in the outer context (TLA+ forbids later bounds referring to
        # earlier bound names in the same declaration list).
        return [self.value(s, ctx) for _, s in bounds]

    def iter_bind(self, bounds, sets, st, pr, env):
        """Every env extension for a list of bounds (sets are evaluated once, outside)."""
        vals = [list(iter_values(f(st, pr, env))) for f, _ in sets]
        if all(isinstance(p, str) for p, _ in bounds):
            if len(vals) == 2:
                v1 = vals[1]
                for a in vals[0]:
                    ea = env + (a,)
                    for b in v1:
                        yield ea + (b,)
                return
            for combo in _product(vals):
                yield env + combo
            return
        binders = [_binder(p) for p, _ in bounds]
        for combo in _product(vals):
            e = env
            for bind, x in zip(binders, combo):
                e = bind(e, x)
            yield e

    # ============================================================ action compilation
    def action(self, node, ctx: Ctx) -> tuple[Callable, int]:
        if isinstance(node, str):
            return self.guard(node, ctx)
        meth = getattr(self, "a_" + _name(node), None)
        if meth is None:
            return self.guard(node, ctx)
        return meth(node, ctx)

    def guard(self, node, ctx):
        f, flags = self.value(node, ctx)
        loc = self.loc(node, ctx)

        def g(st, pr, env):
            v = f(st, pr, env)
            if v is True:
                return [pr]
            if v is False:
                return []
            raise EvalError(f"action conjunct evaluated to {fmt(v)}, not a boolean", loc)
        return g, flags

    def a_Parentheses(self, node, ctx):
        return self.action(node.expression, ctx)

    def a_VerticalList(self, node, ctx):
        items = [it.expression for it in node.arguments]
        if node.operator in ("/\\", "\\land"):
            return self.conj(items, ctx)
        return self.disj(items, ctx)

    def a_VerticalItem(self, node, ctx):
        return self.action(node.expression, ctx)

    def conj(self, items, ctx):
        parts = [self.action(x, ctx) for x in items]
        if len(parts) == 1:
            return parts[0]
        first = parts[0][0]
        # TLC evaluates a later conjunct as a plain boolean once every variable is
        # assigned (no splitting of its \/ or \E): this decides the generated count.
        rest = [(f, self.value(x, ctx)[0], self.loc(x, ctx)) for x, (f, _) in zip(items[1:], parts[1:])]

        def conj(st, pr, env):
            cur = first(st, pr, env)
            for f, vf, loc in rest:
                if not cur:
                    return cur
                nxt = []
                for p in cur:
                    if UNSET in p:
                        nxt.extend(f(st, p, env))
                    else:
                        v = vf(st, p, env)
                        if v is True:
                            nxt.append(p)
                        elif v is not False:
                            raise EvalError(f"action conjunct evaluated to {fmt(v)}, not a boolean", loc)
                cur = nxt
            return cur
        return conj, _or(parts)

    def disj(self, items, ctx):
        parts = [self.action(x, ctx) for x in items]
        fns = [f for f, _ in parts]

        def disj(st, pr, env):
            out = []
            for f in fns:
                out.extend(f(st, pr, env))
            return out
        return disj, _or(parts)

    def a_If(self, node, ctx):
        return self.if_then_else(node, ctx, self.action)

    def a_Cases(self, node, ctx):
        arms = [(self.value(ci.predicate, ctx)[0], self.action(ci.expression, ctx)[0]) for ci in node.cases]
        other = self.action(node.other, ctx)[0] if node.other is not None else None
        loc = self.loc(node, ctx)

        def case(st, pr, env):
            # as TLC: the first arm whose guard holds, else OTHER
            for p, e in arms:
                v = p(st, pr, env)
                if v is True:
                    return e(st, pr, env)
                if v is not False:
                    raise EvalError(f"CASE guard is {fmt(v)}, not a boolean", loc)
            if other is None:
                raise EvalError("no CASE arm applies and there is no OTHER", loc)
            return other(st, pr, env)
        return case, F_STATE

    def a_Let(self, node, ctx):
        inner, pushes = self.let_ctx(node, ctx)
        body, bflags = self.action(node.expression, inner)
        return self.let_wrap(pushes, body), _let_flags(pushes, bflags)

    def a_Quantification(self, node, ctx):
        bounds = self.bounds(node.declarations, ctx)
        names = [n for pat, _ in bounds for n in _pat_names(pat)]
        body, bf = self.action(node.predicate, self._bind(ctx, names, node))
        sets = self.bound_sets(bounds, ctx)
        flags = _or([(0, f) for _, f in sets]) | bf
        if node.quantifier == "\\E":
            if len(bounds) == 1 and isinstance(bounds[0][0], str):
                sfn = sets[0][0]

                def exists(st, pr, env):
                    out = []
                    for x in iter_values(sfn(st, pr, env)):
                        out.extend(body(st, pr, env + (x,)))
                    return out
                return exists, flags

            def exists_n(st, pr, env):
                out = []
                for env2 in self.iter_bind(bounds, sets, st, pr, env):
                    out.extend(body(st, pr, env2))
                return out
            return exists_n, flags

        def forall(st, pr, env):
            cur = [pr]
            for env2 in self.iter_bind(bounds, sets, st, pr, env):
                nxt = []
                for p in cur:
                    nxt.extend(body(st, p, env2))
                cur = nxt
                if not cur:
                    break
            return cur
        return forall, flags

    def a_SubscriptedAction(self, node, ctx):
        a, af = self.action(node.action, ctx)
        if node.operator == "[":
            u, uf = self.unchanged(node.subscript, ctx)
            return (lambda st, pr, env: a(st, pr, env) + u(st, pr, env)), af | uf
        v, _ = self.value(node.subscript, ctx)
        vp, _ = self.value(node.subscript, Ctx(ctx.scope, ctx.names, ctx.localops, ctx.varmode, True, ctx.module))
        loc = self.loc(node, ctx)
        return (lambda st, pr, env: [p for p in a(st, pr, env) if not _eq(vp(st, p, env), v(st, p, env), loc)]), \
            af | F_STATE

    def a_SubexpressionReference(self, node, ctx):
        return self.instance_ref(node, ctx, "action")

    def a_OperatorApplication(self, node, ctx):
        op = SYNONYMS.get(node.operator, node.operator) if isinstance(node.operator, str) else node.operator
        args = node.arguments or []
        if op == "/\\":
            return self.conj(args, ctx)
        if op == "\\/":
            return self.disj(args, ctx)
        if op == "=" and args:
            target = self.assign_target(args[0], ctx)
            if target is not None:
                return self.assign(target, args[1], ctx)
        if op == "\\in" and args:
            target = self.assign_target(args[0], ctx)
            if target is not None:
                return self.assign_in(target, args[1], ctx)
        if op == "UNCHANGED":
            return self.unchanged(args[0], ctx)
        if op == "=>":
            c, cf = self.value(args[0], ctx)
            b, bf = self.action(args[1], ctx)

            def implies(st, pr, env):
                v = c(st, pr, env)
                if v is False:
                    return [pr]
                return b(st, pr, env)
            return implies, cf | bf
        if op in _SPECIAL_VALUE or not isinstance(op, str):
            return self.guard(node, ctx)
        r = self.resolve(op, ctx)
        if isinstance(r, OpDef):
            return self.def_call(node, r, args, ctx, "action")
        if isinstance(r, tuple) and r[0] == "localop":
            return self.localop_call(node, r[1], args, ctx, "action")
        if isinstance(r, Subst):
            return self.subst_ref(r, ctx, "action")
        return self.guard(node, ctx)

    def assign_target(self, node, ctx):
        """The variable index if `node` is x' (or x in init mode) for a state variable."""
        while _name(node) == "Parentheses":
            node = node.expression
        if _name(node) != "OperatorApplication":
            return None
        if ctx.varmode == "init" and not ctx.primed:
            inner = node
        elif node.operator == "'" and not ctx.primed:
            inner = node.arguments[0]
            while _name(inner) == "Parentheses":
                inner = inner.expression
            if _name(inner) != "OperatorApplication":
                return None
        else:
            return None
        if inner.arguments:
            return None
        r = self.resolve(inner.operator, ctx)
        if isinstance(r, tuple) and r[0] == "var":
            return r[1]
        if isinstance(r, Subst):
            # x' where x is an instance parameter substituted by a variable
            e = r.expr
            while _name(e) == "Parentheses":
                e = e.expression
            if _name(e) == "OperatorApplication" and not e.arguments:
                rr = self.resolve(e.operator, r.ctx)
                if isinstance(rr, tuple) and rr[0] == "var":
                    return rr[1]
        return None

    def assign(self, i: int, rhs, ctx):
        f, flags = self.value(rhs, ctx)
        loc = self.loc(rhs, ctx)

        def assign(st, pr, env):
            v = f(st, pr, env)
            if type(v) not in _SIMPLE:
                v = normalize(v)
            old = pr[i]
            if old is UNSET:
                p = pr.copy()
                p[i] = v
                return [p]
            return [pr] if _eq(old, v, loc) else []
        return assign, flags | F_STATE

    def assign_in(self, i: int, rhs, ctx):
        f, flags = self.value(rhs, ctx)

        def assign_in(st, pr, env):
            s = f(st, pr, env)
            old = pr[i]
            if old is not UNSET:
                return [pr] if in_set(old, s) else []
            out = []
            for v in iter_values(s):
                if type(v) not in _SIMPLE:
                    v = normalize(v)
                p = pr.copy()
                p[i] = v
                out.append(p)
            return out
        return self.wrap_errors(assign_in, rhs, ctx), flags | F_STATE

    def unchanged(self, node, ctx):
        """UNCHANGED e: assign every variable inside e (through tuples and definitions)."""
        idxs = self.unchanged_vars(node, ctx)
        if idxs is None:
            f, flags = self.sv_unchanged(node, [node], ctx)
            return (lambda st, pr, env: [pr] if f(st, pr, env) else []), flags

        loc = self.loc(node, ctx)

        def unchanged(st, pr, env):
            p = None
            for i in idxs:
                old = pr[i]
                if old is UNSET:
                    if p is None:
                        p = pr.copy()
                    p[i] = st[i]
                elif not _eq(old, st[i], loc):
                    return []
            return [p if p is not None else pr]
        return unchanged, F_STATE

    def unchanged_vars(self, node, ctx):
        while _name(node) == "Parentheses":
            node = node.expression
        if _name(node) == "Tuple":
            out = []
            for it in node.items:
                sub = self.unchanged_vars(it, ctx)
                if sub is None:
                    return None
                out += sub
            return out
        if _name(node) == "OperatorApplication" and not node.arguments:
            r = self.resolve(node.operator, ctx)
            if isinstance(r, tuple) and r[0] == "var":
                return [r[1]]
            if isinstance(r, OpDef) and not r.params and not r.is_fn and not r.is_instance:
                sctx = Ctx(r.scope, (), (), ctx.varmode, ctx.primed, r.module)
                return self.unchanged_vars(r.body, sctx)
            if isinstance(r, Subst):
                return self.unchanged_vars(r.expr, r.ctx)
        return None


# ====================================================================== runtime helpers
def _instance_args(ctx: Ctx) -> int:
    """How many arguments of a parameterized instance lead ctx's bound names (the "$i" slots
    `instance_ref` binds first): 0 outside such an instance's body."""
    n = 0
    for name, _ in ctx.names:
        if name != "$i":
            break
        n += 1
    return n


class Lazy:
    """A LET-bound zero-arity definition: evaluated on first use, in the primed state of
    that use. A LET definition means its body where it is used (TLC evaluates it there):
    in an action the primed variables are assigned conjunct by conjunct, each assignment
    giving a new primed state, so `LET nx == x' IN x' = e /\\ y' = nx` reads the x' its use
    sees, not the unassigned one of the LET's entry (that was a false "read before it is
    assigned"). The value is kept for uses in the same primed state (in a state predicate,
    every use: pr is None there)."""
    __slots__ = ("code", "st", "pr", "env", "val", "done")

    def __init__(self, code, st, pr, env):
        self.code, self.st, self.pr, self.env = code, st, pr, env
        self.done = False

    def force(self, pr):
        if not self.done or pr is not self.pr:
            self.val = self.code(self.st, pr, self.env)
            self.pr, self.done = pr, True
        return self.val


def apply_fn(f, x, loc):
    t = type(f)
    if t is tuple:
        if type(x) is int and 1 <= x <= len(f):
            return f[x - 1]
        raise EvalError(f"index {fmt(x)} is out of the domain 1..{len(f)} of {fmt(f)}", loc)
    if t is Fcn:
        try:
            v = f.d[x]
        except KeyError:
            raise EvalError(f"{fmt(x)} is not in the domain of {fmt(f)}", loc) from None
        except TypeError:
            raise EvalError(f"{fmt(x)} is not in the domain of {fmt(f)}", loc) from None
        if not fcn_key_ok(f, x):
            # Python's 1 == TRUE: the key found may be TRUE where x is 1 (TLC: an error)
            k = stored(f.d, x)
            if k is not x:
                r = crossing(x, k)
                if r is not None:
                    raise EvalError(crossing_error(r, x, k, f"applying {fmt(f)} to {fmt(x)}"), loc)
        return v
    if t is RecFcn:
        try:
            return f.apply(x)
        except EvalError as e:
            if e.loc is None:
                e.loc = loc
            raise
    if t is str and type(x) is int and 1 <= x <= len(f):
        return f[x - 1]
    raise EvalError(f"applying {fmt(f)}, which is not a function, to {fmt(x)}", loc)


def update_path(val, keys, fn, loc):
    """[val EXCEPT ![k1][k2]... = fn(@)] for one path."""
    k = keys[0]
    if not in_domain(val, k):
        return val  # [f EXCEPT ![c] = e] = f when c \notin DOMAIN f (by its definition)
    old = apply_fn(val, k, loc)
    new = fn(old) if len(keys) == 1 else update_path(old, keys[1:], fn, loc)
    if type(val) is tuple:
        lst = list(val)
        lst[k - 1] = new
        return tuple(lst)
    if type(val) is Fcn:
        d = dict(val.d)
        d[k] = new
        return Fcn(d, val.kk)      # (the same keys)
    if type(val) is RecFcn:
        d = dict(_as_dict(val.materialize()))
        d[k] = new
        return mk_fcn(d)
    raise EvalError(f"EXCEPT applied to non-function {fmt(val)}", loc)


def _as_dict(f):
    if type(f) is tuple:
        return {i + 1: x for i, x in enumerate(f)}
    return f.d


def _eq(x, y, loc) -> bool:
    """TLA+'s x = y (`tla_eq`), its errors located at loc."""
    if x is y:
        return True
    try:
        return tla_eq(x, y)
    except EvalError as e:
        if e.loc is None:
            e.loc = loc
        raise


def _bool(v):
    if v is True or v is False:
        return v
    raise EvalError(f"expected a boolean, got {fmt(v)}")


def _or(parts) -> int:
    flags = 0
    for p in parts:
        flags |= p[1]
    return flags


def _let_flags(pushes, bflags):
    flags = bflags
    for _, _, f in pushes:
        flags |= f
    return flags | (F_ENV if pushes else 0)


def _uses_outer(flags, ctx) -> bool:
    # Conservative: any env use inside a binder counts as using the outer env when the
    # outer context has bound names; at top level (no names) the body's env uses are its own.
    return bool(flags & F_ENV) and bool(ctx.names)


def _outer_env(flags, ctx) -> int:
    return F_ENV if _uses_outer(flags, ctx) else 0


def _pat_names(pat):
    if isinstance(pat, tuple):
        out = []
        for p in pat:
            out += _pat_names(p)
        return out
    return [pat]


def _homes(name: str) -> list[str]:
    """The standard modules that define `name` (Reals left out: it is Integers')."""
    name = SYNONYMS.get(name, name)
    return [m for m, names in MODULE_NAMES.items() if name in names and m != "Reals"]


def _extends_hint(name: str) -> str:
    """What to add for a standard module's operator that resolved to nothing (its module
    not extended), or nothing for a name no standard module defines."""
    homes = _homes(name)
    return f" (defined by {' and '.join(homes)}: EXTENDS {homes[0]})" if homes else ""


def _standard_home(name: str) -> str:
    """Where a standard operator that a declaration or binder clashes with comes from."""
    return f" (also defined by the standard module {' / '.join(_homes(name))}, which is extended here)"


def _binder(pat):
    if isinstance(pat, str):
        return lambda env, x: env + (x,)
    names = _pat_names(pat)
    n = len(names)

    def bind(env, x):
        flat = _flatten(pat, x)
        if len(flat) != n:
            raise EvalError(f"cannot bind {fmt(x)} to a tuple pattern of {n} names")
        return env + tuple(flat)
    return bind


def _flatten(pat, x):
    if isinstance(pat, str):
        return [x]
    if type(x) is not tuple or len(x) != len(pat):
        raise EvalError(f"cannot bind {fmt(x)} to a tuple pattern")
    out = []
    for p, v in zip(pat, x):
        out += _flatten(p, v)
    return out


def _product(lists):
    import itertools
    return itertools.product(*lists)


#: constructs whose evaluation errors (e.g. enumerating Seq(S)) get this node's location
_LOCATE = frozenset({"Quantification", "SetSlice", "SetComprehension", "Function", "Choose", "Except",
                     "SetOfFunctions", "SetOfRecords"})

_SPECIAL_VALUE = {
    "/\\": "sv_and", "\\/": "sv_or", "~": "sv_not", "=>": "sv_implies", "<=>": "sv_equiv",
    "=": "sv_eq", "#": "sv_neq", "\\in": "sv_in", "\\notin": "sv_notin", "'": "sv_prime",
    "UNCHANGED": "sv_unchanged", "ENABLED": "sv_enabled", "[]": "sv_box", "<>": "sv_temporal",
    "~>": "sv_temporal", "-+->": "sv_temporal", "\\cdot": "sv_temporal",
}
