"""Compile a TLA+ spec's actions and invariants to Python monitor SOURCE.

The generator walks the same syntax trees the interpreter compiles (`hicache.tla.loader`,
name resolution through `hicache.tla.compiler.Model`'s scopes) and emits one module per
spec. An action is compiled as a predicate over a pair of states (s, t): unprimed variables
read `s`, primed ones read `t`, so `x' = e` becomes `t["x"] == e`, `x' \\in S` membership and
UNCHANGED equality -- exactly the meaning of a TLA+ action, which makes a generated check
agree with the interpreter's successor enumeration (the differential test checks this).

Output is deterministic: definitions in source order, builtins sorted, no timestamps, so
`hicache gen --check` can compare bytes.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

from hicache.tla.cfg import load_cfg
from hicache.tla.checker import _split_spec
from hicache.tla.compiler import Compiler, Model, OpDef
from hicache.tla.errors import SemanticError
from hicache.tla.loader import Loader, node_loc
from hicache.tla.stdlib import BUILTINS, CONSTANTS, SYNONYMS


class _Unbound:
    """Placeholder value of a constant at generation time (never evaluated)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "<constant bound at run time>"


_UNBOUND = _Unbound()


class Unsupported(SemanticError):
    """A construct the code generator does not translate (named with its location)."""


def _k(node) -> str:
    return type(node).__name__


def _strip(node):
    while _k(node) == "Parentheses":
        node = node.expression
    return node


#: names generated code may take from hicache.monitors.rt (imported when used)
_RT_NAMES = ("BI", "STD", "Failure", "Fcn", "FcnSet", "Interval", "RecordSet", "ap", "bool_free", "case_fail", "choose",
             "fast_ap", "FastPathFailed", "conj_error", "exc", "in_c", "in_set", "it", "mk_fcn", "no_ap", "normalize", "once")

#: inlined Python operators for integer/boolean builtins (same results on valid inputs)
_INLINE_BIN = {"+": "+", "-": "-", "*": "*", "<": "<", ">": ">", "<=": "<=", ">=": ">="}


@dataclass(frozen=True, slots=True)
class Env:
    names: tuple = ()          # (tla name, kind, python name); kind: val | let | letop
    s: str = "s"               # python name of the current state
    t: str | None = "t"        # python name of the next state (None: primes illegal)

    def bind(self, *items) -> "Env":
        return Env(self.names + tuple(items), self.s, self.t)

    def primed(self) -> "Env":
        return Env(self.names, self.t, None)


@dataclass
class SpecInfo:
    name: str
    rel: str                                  # spec path as written in locations
    constants: list[str]
    variables: list[str]
    invariants: list[str]
    source: str = ""
    actions: list[str] = field(default_factory=list)


#: loop-invariant reads of a fast path: a state variable applied to an argument, a state
#: variable, a constant, a standard set (not preceded by a name character or a dot, so
#: `xs['a']` or `f.C['a']` never match)
_FAST_AP = re.compile(r"(?<![\w.])ap\(s\[('[A-Za-z_][A-Za-z_0-9]*')\], ")
#: a constant-level set as translated: `C['K']` (a CONSTANT, a constant definition, a hoisted set)
_CONST_REF = re.compile(r"C\['([^'\\]*)'\]")
_FAST_REF = re.compile(r"(?<![\w.])(s|C|STD)\[('[^'\\]*'|\"[^\"\\]*\")\]")


def _hoist_fast(exprs: list[str], first: int = 0) -> tuple[list[str], list[str]]:
    """(prelude, exprs) with every loop-invariant read of a fast path bound once to a local.

    A fast path evaluates the same `s['v']`, `C['...']` and `STD[...]` once per element of
    a domain; binding them first leaves the loop one local read each, and `ap(s['v'], x)`
    becomes `fast_ap`'s callable (a function's dict lookup). Only the fast path is rewritten:
    it decides nothing on its own (FALSE or an exception runs the exact form), and a binding
    raising (a variable missing) sends the check to the exact form as well."""
    names: dict[str, str] = {}
    prelude: list[str] = []

    def bind(code: str, base: str) -> str:
        if code not in names:
            names[code] = f"{base}{first + len(names)}"
            prelude.append(f"{names[code]} = {code}")
        return names[code]

    def ap_sub(m) -> str:
        return bind(f"fast_ap(s[{m.group(1)}])", "_a") + "("

    def ref_sub(m) -> str:
        return bind(f"{m.group(1)}[{m.group(2)}]", "_r")

    out = [_FAST_REF.sub(ref_sub, _FAST_AP.sub(ap_sub, e)) for e in exprs]
    return prelude, out


@dataclass(frozen=True, slots=True)
class _FastConjunct:
    """One conjunct in a generated fast path: `guard` (a local name) is bound to `cond`
    ("a variable it reads changed"); `domain` None: `code` is the whole conjunct, else the
    predicate of one element `e_<domain>` of D[domain]."""
    guard: str
    cond: str
    domain: str | None
    code: str


def _fast_path(entries: list, indent: str) -> list[str]:
    """The body of a fast path over `entries`: one block per non-local conjunct, one loop per
    domain over the local conjuncts of every entry in it (and a second over those without a
    closure, run when every conjunct with one is skipped: see below); a block runs only when
    one of its guards holds and binds only what it reads (`_hoist_fast`); anything not TRUE
    raises FastPathFailed."""
    out: list[str] = []
    bound = 0
    by_dom: dict = {}
    blocks = []
    for en in entries:
        if en.domain is None:
            blocks.append([en])
        elif en.domain not in by_dom:
            by_dom[en.domain] = [en]
            blocks.append(by_dom[en.domain])
        else:
            by_dom[en.domain].append(en)
    for block in blocks:
        dom = block[0].domain
        rest = None
        if dom is None or len(block) == 1:
            prelude, (code,) = _hoist_fast([block[0].code], bound)
        else:
            prelude, codes = _hoist_fast([en.code for en in block], bound)
            code = " and ".join(f"(not {en.guard} or {c})" for en, c in zip(block, codes))
            prelude = _gate_reads(prelude, [en.guard for en in block], codes)
            # a conjunct that builds a closure per element (a LET's `lambda`) keeps the loop
            # from being compiled (fused_native) and costs a Python frame an element: where
            # none of those conjuncts applies (a map that checks that invariant in its own
            # form skips it), a second loop over the others alone runs instead, when they
            # hold no closure nor comprehension (one that does stays Python either way)
            held = [en.guard for en, c in zip(block, codes) if "lambda" in c]
            others = [(en, c) for en, c in zip(block, codes) if en.guard not in held]
            if held and others and not any(" for " in c for _, c in others):
                rest = (held, " and ".join(f"(not {en.guard} or {c})" for en, c in others))
        bound += len(prelude)
        if dom is None:
            out.append(f"{indent}if ({block[0].cond}):\n")
            out += [f"{indent}    {line}\n" for line in prelude]
            out.append(f"{indent}    if not {code}:\n")
            out.append(f"{indent}        raise FastPathFailed()\n")
            continue
        # a loop over no elements holds: nothing is bound for it, and its guards are not
        # computed (most steps change elements of one domain: a request's event, no page)
        if len(block) == 1:
            out.append(f"{indent}if D[{dom!r}] and ({block[0].cond}):\n")
            body = indent + "    "
        else:
            out.append(f"{indent}if D[{dom!r}]:\n")
            out += [f"{indent}    {en.guard} = {en.cond}\n" for en in block]
            out.append(f"{indent}    if {' or '.join(en.guard for en in block)}:\n")
            body = indent + "        "
        out += [f"{body}{line}\n" for line in prelude]
        if rest is None:
            out += _element_loop(dom, code, body)
            continue
        held, rest_code = rest
        out.append(f"{body}if not ({' or '.join(held)}):\n")
        out += _element_loop(dom, rest_code, body + "    ")
        out.append(f"{body}else:\n")
        out += _element_loop(dom, code, body + "    ")
    return out


def _element_loop(dom: str, code: str, indent: str) -> list[str]:
    """A fast path's loop over the elements D[dom] of predicate `code` (raising
    FastPathFailed where it is not TRUE), one element at a time: what the predicate reads
    of the element more than once is read once, first (eagerly: where the exact form's
    short-circuit would have skipped a read that raises, the fast path fails and the exact
    form decides)."""
    var = _pyname("e_", dom)
    reads, code = _share_element_reads(code, var)
    code = _inline_members(code, var)
    return [f"{indent}for {var} in it(D[{dom!r}]):\n",
            *(f"{indent}    {name} = {expr}\n" for name, expr in reads),
            f"{indent}    if not ({code}):\n",
            f"{indent}        raise FastPathFailed()\n"]


def _gate_reads(prelude: list[str], guards: list[str], codes: list[str]) -> list[str]:
    """`prelude` with each hoisted function of a fused loop that only some of its conjuncts
    apply bound by `fast_ap` only when one of them runs (its guard holds), else by `no_ap`,
    whose callable reads nothing (None): `fast_ap` of a sequence builds a callable, and a
    step that changed one request's phase built one for every row variable of the request
    loop. Where none of its conjuncts runs, each is skipped by its guard before it reads
    what `no_ap`'s callable returned; a read of the element shared by several conjuncts
    (`_share_element_reads`) is made first, and is then only discarded."""
    out = []
    for line in prelude:
        name, expr = line.split(" = ", 1)
        if expr.startswith("fast_ap("):     # (a constant's or a variable's read: always bound)
            use = re.compile(rf"(?<![\w.]){name}\(")
            users = [g for g, c in zip(guards, codes) if use.search(c)]
            if len(users) < len(guards):
                line = f"{name} = {expr} if {' or '.join(users) or 'False'} else no_ap{expr[len('fast_ap'):]}"
        out.append(line)
    return out


#: a read of one element in a fast path: a hoisted function applied to it, or a state-level
#: definition of it alone
_ELEMENT_READ = r"(?<![\w.])(?:_a\d+\({v}\)|d_\w+\(C, s, None, {v}\))"


def _share_element_reads(code: str, var: str) -> tuple[list[tuple[str, str]], str]:
    """([(local, read)], code) with each read of element `var` that occurs more than once in
    `code` bound to a local (`_e0`, `_e1`, ... in order of first occurrence)."""
    pat = re.compile(_ELEMENT_READ.format(v=re.escape(var)))
    seen: dict[str, int] = {}
    for m in pat.finditer(code):
        seen[m.group(0)] = seen.get(m.group(0), 0) + 1
    names = {expr: f"_e{i}" for i, expr in enumerate(e for e, k in seen.items() if k > 1)}
    if not names:
        return [], code
    return [(n, e) for e, n in names.items()], pat.sub(lambda m: names.get(m.group(0), m.group(0)), code)


#: `in_c(x, S, flag)` in a fast path's loop with x a local (the element, or one of its shared
#: reads) and S and its flag hoisted locals
_MEMBER_CALL = r"(?<![\w.])in_c\(({v}|_e\d+), (_r\d+), (_r\d+)\)"


def _inline_members(code: str, var: str) -> str:
    """`in_c`'s common case in place in a fast path's loop (a call per element per membership
    was 1.5 % of strict mode's instructions): with the flag set (S holds no boolean), an
    integer or string found in S is a member; with it unset, the interpreter's `in_set`. An
    element of another kind found in S (a tuple) makes the test FALSE, which only sends the
    check to the exact form (where `in_c` decides it)."""
    pat = re.compile(_MEMBER_CALL.format(v=re.escape(var)))
    return pat.sub(lambda m: f"(({m[1]} in {m[2]} and ({m[1]}.__class__ is int or {m[1]}.__class__ is str)) "
                             f"if {m[3]} else in_set({m[1]}, {m[2]}))", code)


#: a state-level definition applied to one plain name in generated code (unprimed)
_DEF_CALL = re.compile(r"(?<![\w.])(d_\w+)\(C, s, None, ([A-Za-z_]\w*)\)")
#: a call in generated code (a name, a subscript or a parenthesis before "(")
_CALL = re.compile(r"[\w\])]\(")
#: the parameter's name in an inlinable definition's body (no generated name has it)
_INLINE_PARAM = "__inline_arg__"


def _in_function_set(c) -> tuple:
    """(f, [Dom -> S]) for a conjunct `f \\in [Dom -> S]`, else (None, None)."""
    c = _strip(c)
    if _k(c) == "OperatorApplication" and c.operator == "\\in" and len(c.arguments or []) == 2:
        fs = _strip(c.arguments[1])
        if _k(fs) == "SetOfFunctions":
            return c.arguments[0], fs
    return None, None


def _pyname(prefix: str, name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return prefix + out


class Generator:
    def __init__(self, spec_path: Path, rel: str, invariants: list[str]):
        self.spec_path = Path(spec_path)
        self.rel = rel
        self.loader = Loader([self.spec_path.parent])
        self.root = self.loader.load_file(self.spec_path)
        # constants are bound at run time (C), not by a .cfg: the Model only needs to know
        # that each declared constant will have a value
        self.model = Model(self.loader, self.root, {n: _UNBOUND for n in self._declared_constants(self.root)})
        Compiler(self.model).resolve_every_definition()     # an unknown name, as SANY refuses it
        self.scope = self.model.root_scope
        self.want_invariants = invariants
        self._inlined: dict[str, str | None] = {}    # definition -> its inlinable body (_inline_body)
        self.files: dict[str, list[str]] = {}
        self.const_memo: dict[str, bool] = {}
        self.builtins_used: set[str] = set()
        self.defs_needed: dict[str, OpDef] = {}
        self.const_needed: set[str] = set()
        self.hoisted: dict[str, str] = {}     # code -> key in C ("$h<i>")
        self.member_flags: set[str] = set()    # keys K of C whose flag C["K!"] (bool_free) in_c reads
        self.no_hoist = False                  # inside a hoisted or constant-level expression
        self.uniq = 0
        self.incremental: dict[str, tuple[str, ...]] = {}   # invariant -> domains it is local in
        self.inc_entries: dict[str, tuple] = {}   # invariant -> (reads table, reads, fast-path conjuncts)
        # invariant -> ((variable, Dom) of each element-wise `f \in [Dom -> S]` conjunct), or
        # None where such an f is not a plain state variable (see fcn_domain)
        self.fcn_domains: dict[str, tuple | None] = {}

    def _declared_constants(self, mod, seen=None) -> list[str]:
        seen = set() if seen is None else seen
        if mod is None or mod.name in seen:
            return []
        seen.add(mod.name)
        out = [n for n, _, _ in mod.constants]
        for ext in mod.extends:
            out += self._declared_constants(self.loader.get(ext), seen)
        return out

    # ------------------------------------------------------------- locations
    def loc(self, node, mod=None) -> str:
        mod = mod or self.root
        lc = node_loc(mod.file, node)
        return f"{self.rel}:{lc.line}:{lc.col}"

    def line(self, node, mod=None) -> int:
        return node_loc((mod or self.root).file, node).line

    def text(self, node, mod=None) -> str:
        mod = mod or self.root
        lines = self.files.get(mod.file)
        if lines is None:
            lines = self.files[mod.file] = Path(mod.file).read_text().splitlines()
        lc = node_loc(mod.file, node)
        if not lc.end_line:
            return lines[lc.line - 1][lc.col - 1:].strip()
        if lc.end_line == lc.line:
            seg = lines[lc.line - 1][lc.col - 1:lc.end_col]
        else:
            seg = " ".join([lines[lc.line - 1][lc.col - 1:]] + [x.strip() for x in lines[lc.line:lc.end_line - 1]]
                           + [lines[lc.end_line - 1][:lc.end_col].strip()])
        return " ".join(seg.split())

    def unsupported(self, what: str, node):
        lc = node_loc(self.root.file, node)
        raise Unsupported(f"unsupported construct {what}", lc)

    # ------------------------------------------------------------- levels
    def is_const_def(self, d: OpDef) -> bool:
        """A definition that reads no variable (directly or through others): evaluated once."""
        hit = self.const_memo.get(d.name)
        if hit is not None:
            return hit
        self.const_memo[d.name] = False      # recursion: conservatively state-level
        ok = self._const_node(d.body)
        self.const_memo[d.name] = ok
        return ok

    def _const_node(self, node) -> bool:
        if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            return all(self._const_node(x) for x in node)
        if not hasattr(node, "_fields"):
            return True
        k = _k(node)
        if k == "OperatorApplication" and isinstance(node.operator, str):
            if node.operator in ("'", "UNCHANGED", "ENABLED"):
                return False
            e = self.scope.entries.get(node.operator)
            if isinstance(e, tuple) and e[0] == "var":
                return False
            if isinstance(e, OpDef) and not self.is_const_def(e):
                return False
        for f in node._fields:
            if f in ("start", "end", "symbol"):
                continue
            if not self._const_node(getattr(node, f)):
                return False
        return True

    # ------------------------------------------------------------- expressions
    def resolve(self, name: str, env: Env):
        for n, kind, py in reversed(env.names):
            if n == name:
                return (kind, py)
        e = self.scope.entries.get(name)
        if e is not None:
            return e
        name = SYNONYMS.get(name, name)
        if name in CONSTANTS:
            return ("stdconst", name)
        if name in BUILTINS:
            return ("builtin", name)
        return None

    def fresh(self, base: str) -> str:
        self.uniq += 1
        return f"{base}{self.uniq}"

    def e(self, node, env: Env) -> str:
        if isinstance(node, str):
            if node == "@":
                return self.e_name("@", [], node, env)
            self.unsupported(f"token {node!r}", node)
        meth = getattr(self, "x_" + _k(node), None)
        if meth is None:
            self.unsupported(_k(node), node)
        if not self.no_hoist and self.hoistable(node, env):
            # a closed constant set constructor: built once per constants binding (lazy sets
            # such as [S -> T] then keep what they materialized across checks)
            self.no_hoist = True
            try:
                code = meth(node, env)
            finally:
                self.no_hoist = False
            key = self.hoisted.setdefault(code, f"$h{len(self.hoisted)}")
            return f"C[{key!r}]"
        return meth(node, env)

    #: set constructors that cannot fail on well-formed constants (hoisting evaluates them
    #: eagerly, so an expression that may raise when evaluated must not be hoisted)
    _HOIST_OPS = frozenset({"..", "\\cup", "\\cap", "\\", "\\X", "SUBSET"})

    def hoistable(self, node, env: Env) -> bool:
        k = _k(node)
        if k in ("SetOfFunctions", "SetOfRecords"):
            pass
        elif k == "SetEnumeration":
            if not node.items:
                return False
        elif k == "OperatorApplication" and isinstance(node.operator, str):
            if SYNONYMS.get(node.operator, node.operator) not in self._HOIST_OPS:
                return False
            r = self.resolve(node.operator, env)
            if not (isinstance(r, tuple) and r[0] == "builtin"):
                return False
        else:
            return False
        return self._const_node(node) and not self._mentions(node, {n for n, _, _ in env.names})

    def _mentions(self, node, names: set) -> bool:
        """Whether node refers to any of `names` (bound names of the context)."""
        if not names:
            return False
        if isinstance(node, str):
            return node in names
        if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            return any(self._mentions(x, names) for x in node)
        if not hasattr(node, "_fields"):
            return False
        if _k(node) == "OperatorApplication" and isinstance(node.operator, str) and node.operator in names:
            return True
        for f in node._fields:
            if f not in ("start", "end", "symbol") and self._mentions(getattr(node, f), names):
                return True
        return False

    def x_Parentheses(self, node, env):
        return self.e(node.expression, env)

    def x_VerticalList(self, node, env):
        items = [self.e(it.expression, env) for it in node.arguments]
        op = " and " if node.operator in ("/\\", "\\land") else " or "
        return "(" + op.join(items) + ")"

    def x_VerticalItem(self, node, env):
        return self.e(node.expression, env)

    def x_IntegralNumeral(self, node, env):
        return str(int(node.value))

    def x_StringLiteral(self, node, env):
        import ast
        raw = node.value
        return repr(ast.literal_eval(raw) if raw.startswith('"') else raw)

    def x_BooleanLiteral(self, node, env):
        return "True" if node.value == "TRUE" else "False"

    def x_SetOfBooleans(self, node, env):
        return 'STD["BOOLEAN"]'

    def x_SetOfStrings(self, node, env):
        return 'STD["STRING"]'

    def x_Tuple(self, node, env):
        items = [self.e(x, env) for x in node.items]
        if len(items) == 1:
            return f"({items[0]},)"
        return "(" + ", ".join(items) + ")"

    def x_SetEnumeration(self, node, env):
        items = [self.e(x, env) if _k(x) in ("StringLiteral", "IntegralNumeral", "BooleanLiteral")
                 else f"normalize({self.e(x, env)})" for x in node.items]
        if not items:
            return "frozenset()"
        return "frozenset((" + ", ".join(items) + ",))"

    def x_Record(self, node, env):
        parts = []
        for kv in node.key_values:
            k, v = (kv[0], kv[1]) if isinstance(kv, (list, tuple)) and not hasattr(kv, "_fields") \
                else (kv.name, kv.expression)
            parts.append(f"{k!r}: {self.e(v, env)}")
        return "Fcn({" + ", ".join(parts) + "})"

    def x_SetOfRecords(self, node, env):
        parts = [f"{kb.name!r}: {self.e(kb.bound, env)}" for kb in node.key_bounds]
        return "RecordSet({" + ", ".join(parts) + "})"

    def x_SetOfFunctions(self, node, env):
        return f"FcnSet({self.e(node.domain, env)}, {self.e(node.codomain, env)})"

    def x_Field(self, node, env):
        return f"ap({self.e(node.expression, env)}, {node.name!r})"

    def x_FunctionApplication(self, node, env):
        f = self.e(node.function, env)
        args = [self.e(a, env) for a in node.arguments]
        if len(args) == 1:
            return f"ap({f}, {args[0]})"
        return f"ap({f}, ({', '.join(args)}))"

    def x_If(self, node, env):
        return f"({self.e(node.then, env)} if {self.e(node.predicate, env)} else {self.e(node.else_, env)})"

    def x_Cases(self, node, env):
        out = self.e(node.other, env) if node.other is not None else f"case_fail({self.loc(node)!r})"
        for ci in reversed(node.cases):
            out = f"({self.e(ci.expression, env)} if {self.e(ci.predicate, env)} else {out})"
        return out

    def x_Let(self, node, env):
        binds = []
        cur = env
        for d in node.definitions:
            if _k(d) != "OperatorDefinition":
                continue
            if d.function:
                self.unsupported("recursive function definition inside LET", d)
            params = [p.operator if _k(p) == "OperatorApplication" else str(p) for p in (d.arity or [])]
            py = self.fresh(_pyname("l_", d.name) + "_")
            if params:
                pys = [self.fresh(_pyname("v_", p) + "_") for p in params]
                inner = cur.bind(*[(p, "val", q) for p, q in zip(params, pys)])
                binds.append((py, f"(lambda {', '.join(pys)}: {self.e(d.definiens, inner)})"))
                cur = cur.bind((d.name, "letop", py))
            else:
                binds.append((py, f"once(lambda: {self.e(d.definiens, cur)})"))
                cur = cur.bind((d.name, "let", py))
        out = self.e(node.expression, cur)
        for py, val in reversed(binds):
            out = f"(lambda {py}: {out})({val})"
        return out

    def pattern(self, pat, env_items: list) -> str:
        pat = _strip(pat)
        if _k(pat) == "Tuple":
            return "(" + ", ".join(self.pattern(p, env_items) for p in pat.items) + ("," if len(pat.items) == 1 else "") + ")"
        if _k(pat) == "OperatorApplication" and not pat.arguments:
            py = self.fresh(_pyname("v_", pat.operator) + "_")
            env_items.append((pat.operator, "val", py))
            return py
        self.unsupported("bound pattern", pat)

    def bounds(self, decls, env: Env):
        """for-clauses of `x, y \\in S, <<a, b>> \\in T`, and the env binding their names."""
        clauses, items, pending = [], [], []
        for d in decls:
            if _k(d) == "OperatorApplication" and d.operator == "\\in" and d.arguments:
                sset = self.e(d.arguments[1], env)
                for p in pending + [d.arguments[0]]:
                    clauses.append(f"for {self.pattern(p, items)} in it({sset})")
                pending = []
            else:
                pending.append(d)
        if pending:
            self.unsupported("unbounded quantifier", decls[0])
        return " ".join(clauses), env.bind(*items), items

    def x_Quantification(self, node, env):
        clauses, inner, _ = self.bounds(node.declarations, env)
        fn = "all" if node.quantifier == "\\A" else "any"
        return f"{fn}({self.e(node.predicate, inner)} {clauses})"

    def x_Choose(self, node, env):
        decl = node.declaration
        if not (_k(decl) == "OperatorApplication" and decl.operator == "\\in"):
            self.unsupported("unbounded CHOOSE", node)
        items: list = []
        pat = self.pattern(decl.arguments[0], items)
        sset = self.e(decl.arguments[1], env)
        body = self.e(node.predicate, env.bind(*items))
        if pat.startswith("("):
            x = self.fresh("x_")
            return f"choose({sset}, lambda {x}: (lambda {pat.strip('()').rstrip(',')}: {body})(*{x}))"
        return f"choose({sset}, lambda {pat}: {body})"

    def x_SetSlice(self, node, env):
        decl = node.declaration
        items: list = []
        pat = self.pattern(decl.arguments[0], items)
        sset = self.e(decl.arguments[1], env)
        body = self.e(node.predicate, env.bind(*items))
        return f"frozenset({pat} for {pat} in it({sset}) if {body})"

    def x_SetComprehension(self, node, env):
        clauses, inner, _ = self.bounds(node.declarations, env)
        return f"frozenset(normalize({self.e(node.item, inner)}) {clauses})"

    def x_Function(self, node, env):
        clauses, inner, items = self.bounds(node.declaration, env)
        val = self.e(node.value, inner)
        if len(items) == 1:
            key = items[0][2]
        else:
            key = "(" + ", ".join(py for _, _, py in items) + ")"
        return f"mk_fcn({{{key}: {val} {clauses}}})"

    def x_Except(self, node, env):
        f = self.e(node.function, env)
        changes = []
        for ch in node.changes:
            keys = []
            for sel in ch.item:
                if isinstance(sel, str):
                    keys.append(repr(sel))
                else:
                    comp = [self.e(a, env) for a in sel]
                    keys.append(comp[0] if len(comp) == 1 else "(" + ", ".join(comp) + ")")
            at = self.fresh("at_")
            val = self.e(ch.expression, env.bind(("@", "val", at)))
            changes.append(f"(({', '.join(keys)},), lambda {at}: {val})")
        return f"exc({f}, {', '.join(changes)})"

    def x_SubscriptedAction(self, node, env):
        a = self.e(node.action, env)
        v = self.e(node.subscript, env)
        vp = self.e(node.subscript, env.primed())
        if node.operator == "[":
            return f"({a} or {vp} == {v})"
        return f"({a} and {vp} != {v})"

    def x_OperatorApplication(self, node, env):
        op = node.operator
        args = node.arguments or []
        if not isinstance(op, str):
            self.unsupported("operator application of a non-name", node)
        op = SYNONYMS.get(op, op)
        if op in ("/\\", "\\/"):
            parts = [self.e(a, env) for a in args]
            return "(" + (" and " if op == "/\\" else " or ").join(parts) + ")"
        if op == "~":
            return f"(not {self.e(args[0], env)})"
        if op == "=>":
            return f"((not {self.e(args[0], env)}) or {self.e(args[1], env)})"
        if op == "<=>":
            return f"({self.e(args[0], env)} == {self.e(args[1], env)})"
        if op == "=":
            return f"({self.e(args[0], env)} == {self.e(args[1], env)})"
        if op == "#":
            return f"({self.e(args[0], env)} != {self.e(args[1], env)})"
        if op == "\\in":
            return self.member(self.e(args[0], env), args[1], env)
        if op == "\\notin":
            return f"(not {self.member(self.e(args[0], env), args[1], env)})"
        if op == "'":
            if env.t is None:
                self.unsupported("double prime", node)
            return self.e(args[0], env.primed())
        if op == "UNCHANGED":
            return self.unchanged(args[0], env)
        if op in ("ENABLED", "[]", "<>", "~>", "-+->", "\\cdot"):
            self.unsupported(f"temporal/ENABLED operator {op}", node)
        return self.e_name(op, args, node, env)

    def member(self, x: str, set_node, env: Env) -> str:
        """`x \\in S` (x already translated) with TLA+'s kinds, which Python's `in` mixes up:
        True == 1 and False == 0, so `TRUE \\in {0, 1}` and `1 \\in BOOLEAN` would hold and a
        map writing a boolean for a slot id would pass TypeOK. BOOLEAN: the value's class;
        a..b and sets of string literals (directly or through constant definitions): `in`,
        which cannot pair a boolean with an integer there (an Interval tests the type); a
        constant-level set: `in_c`, with a flag computed once per constants binding (whether
        it holds a boolean), at about `in`'s speed; anything else: `in_set` (the interpreter's)."""
        kind = self._set_kind(set_node, env)
        if kind == "bool":
            return f"({x}.__class__ is bool)"
        code = self.e(set_node, env)
        if kind == "exact":
            return f"({x} in {code})"
        m = _CONST_REF.fullmatch(code)
        if m:
            self.member_flags.add(m.group(1))
            return f"in_c({x}, {code}, C[{m.group(1) + '!'!r}])"  # (its flag: see constants())
        return f"in_set({x}, {code})"

    def _set_kind(self, node, env: Env, depth: int = 0) -> str | None:
        """"bool" (BOOLEAN), "exact" (Python's `in` decides as TLA+ does: a..b, a set of
        string literals) or None, through zero-parameter definitions."""
        node = _strip(node)
        k = _k(node)
        if k == "SetOfBooleans":
            return "bool"
        if k == "SetEnumeration":
            return "exact" if node.items and all(_k(_strip(x)) == "StringLiteral" for x in node.items) else None
        if k != "OperatorApplication" or not isinstance(node.operator, str) or depth > 8:
            return None
        op = SYNONYMS.get(node.operator, node.operator)
        r = self.resolve(op, env)
        if isinstance(r, tuple) and r[0] == "builtin" and r[1] == ".." and len(node.arguments or ()) == 2:
            return "exact"
        if isinstance(r, tuple) and r[0] == "stdconst" and r[1] == "BOOLEAN":
            return "bool"
        if isinstance(r, OpDef) and not r.params and not r.is_fn and not node.arguments and not r.is_instance:
            return self._set_kind(r.body, Env(), depth + 1)
        return None

    def unchanged(self, node, env: Env) -> str:
        node = _strip(node)
        if _k(node) == "Tuple":
            parts = [self.unchanged(x, env) for x in node.items]
            return "(" + " and ".join(parts) + ")" if parts else "True"
        if _k(node) == "OperatorApplication" and not node.arguments and isinstance(node.operator, str):
            r = self.resolve(node.operator, env)
            if isinstance(r, OpDef) and not r.params and not r.is_fn and _k(_strip(r.body)) == "Tuple":
                return self.unchanged(r.body, Env((), env.s, env.t))
        if env.t is None:
            self.unsupported("UNCHANGED inside a primed expression", node)
        return f"({self.e(node, env.primed())} == {self.e(node, env)})"

    def e_name(self, op: str, args, node, env: Env) -> str:
        if op == "-" and len(args) == 1:
            return f"(-{self.e(args[0], env)})"
        r = self.resolve(op, env)
        if r is None:
            self.unsupported(f"unknown operator {op}", node)
        if isinstance(r, tuple):
            tag = r[0]
            if tag == "val":
                return r[1]
            if tag == "let":
                return f"{r[1]}()"
            if tag == "letop":
                return f"{r[1]}({', '.join(self.e(a, env) for a in args)})"
            if tag == "var":
                return f"{env.s}[{self.model.variables[r[1]]!r}]"
            if tag == "const":
                if args:
                    self.unsupported(f"constant operator {op} with arguments", node)
                return f"C[{op!r}]"
            if tag == "stdconst":
                return f"STD[{r[1]!r}]"
            if tag == "builtin":
                b = BUILTINS[r[1]]
                if b.op_params:
                    self.unsupported(f"builtin {r[1]} taking an operator argument", node)
                vals = [self.e(a, env) for a in args]
                if r[1] in _INLINE_BIN and len(vals) == 2:
                    return f"({vals[0]} {_INLINE_BIN[r[1]]} {vals[1]})"
                self.builtins_used.add(r[1])
                return f"{self.builtin_alias(r[1])}({', '.join(vals)})"
        if isinstance(r, OpDef):
            if r.is_instance:
                self.unsupported("INSTANCE", node)
            if len(args) != len(r.params):
                self.unsupported(f"{op} applied to {len(args)} arguments", node)
            if any(a for _, a in r.params):
                self.unsupported(f"higher-order operator {op}", node)
            if not r.params and self.is_const_def(r):
                self.const_needed.add(r.name)
                return f"C[{op!r}]"
            self.defs_needed.setdefault(r.name, r)
            vals = [self.e(a, env) for a in args]
            t = env.t if env.t is not None else "None"
            return f"{_pyname('d_', r.name)}(C, {env.s}, {t}{''.join(', ' + v for v in vals)})"
        self.unsupported(f"reference to {op}", node)

    def builtin_alias(self, name: str) -> str:
        table = {"\\cup": "cup", "\\cap": "cap", "\\": "setminus", "\\subseteq": "subseteq",
                 "\\supseteq": "supseteq", "\\subset": "subset_", "\\supset": "supset", "\\X": "times",
                 "..": "range_", "\\div": "div", "%": "mod", "^": "pow_", "-.": "neg", "\\o": "concat",
                 ":>": "colon_gt", "@@": "at_at", "(+)": "bag_plus", "(-)": "bag_minus",
                 "\\sqsubseteq": "sqsubseteq", "+": "plus", "-": "minus", "*": "times_", "<": "lt",
                 ">": "gt", "<=": "le", ">=": "ge"}
        return "_b_" + table.get(name, _pyname("", name))

    # ------------------------------------------------------------- Next's actions
    def split_next(self, node, env: Env, name: str):
        """(action name, any-binding code, action definition or None) for each disjunct of Next.

        Splits through \\/, \\E (whose bound names wrap the disjuncts under it) and zero-arity
        definitions; a disjunct applying a definition is named after it (the vocabulary's
        action names are the spec's operator names).
        """
        node = _strip(node)
        k = _k(node)
        if (k == "VerticalList" and node.operator in ("\\/", "\\lor")) or \
                (k == "OperatorApplication" and node.operator in ("\\/", "\\lor") and node.arguments):
            subs = [it.expression for it in node.arguments] if k == "VerticalList" else node.arguments
            out = []
            for sub in subs:
                out += self.split_next(sub, env, name)
            return out
        if k == "Quantification" and node.quantifier == "\\E":
            clauses, inner, _ = self.bounds(node.declarations, env)
            return [(n, f"any({code} {clauses})", d) for n, code, d in self.split_next(node.predicate, inner, name)]
        if k == "OperatorApplication" and isinstance(node.operator, str):
            r = self.resolve(node.operator, env)
            if isinstance(r, OpDef) and not r.is_instance and not r.is_fn:
                if not r.params and not node.arguments:
                    leaves = self.split_next(r.body, Env((), env.s, env.t), r.name)
                    if len(leaves) == 1 and leaves[0][0] == r.name:
                        return [(r.name, self.e(node, env), r)]
                    return leaves
                return [(r.name, self.e(node, env), r)]
        return [(name, self.e(node, env), None)]

    # ------------------------------------------------------------- conjunct lists
    def conjuncts(self, node) -> list:
        node = _strip(node)
        k = _k(node)
        if k == "VerticalList" and node.operator in ("/\\", "\\land"):
            out = []
            for it in node.arguments:
                out += self.conjuncts(it.expression)
            return out
        if k == "OperatorApplication" and node.operator in ("/\\", "\\land") and node.arguments:
            out = []
            for a in node.arguments:
                out += self.conjuncts(a)
            return out
        return [node]

    def checked_fn(self, fname: str, prop: str, params: list[tuple[str, str]], body, env: Env,
                   sig: str, mod) -> list[str]:
        self.uniq = 0
        conj = self.conjuncts(body)
        table = _pyname("_T_", fname)
        rows = [f"    ({self.text(c, mod)!r}, {self.loc(c, mod)!r}),\n" for c in conj]
        out = [f"{table} = (\n" + "".join(rows) + ")\n\n\n"]
        out.append(f"def {fname}({sig}):\n")
        out.append(f"    \"\"\"{prop} ({self.loc(body, mod)}): None, or the first failing conjunct.\"\"\"\n")
        out.append("    k = 0\n    try:\n")
        for i, c in enumerate(conj, 1):
            code = self.e(c, env)
            out.append(f"        # {self.loc(c, mod)}\n")
            out.append(f"        k = {i}\n")
            out.append(f"        if not {code}:\n")
            out.append(f"            return Failure({prop!r}, {i}, *{table}[{i - 1}])\n")
        out.append("    except Exception as e:  # an evaluation error fails the conjunct it happened in\n")
        out.append(f"        return conj_error({prop!r}, {table}, k, e)\n")
        out.append("    return None\n\n\n")
        return out

    def reads(self, node, acc: set | None = None, seen: set | None = None, kind: str = "var") -> set:
        """The state variables (kind "var") or the CONSTANTS (kind "const") `node` can read,
        through every definition it uses: an over-approximation (a name is followed wherever
        it appears), which is what makes it safe to skip an invariant none of whose
        variables changed (`READS`), or to keep the verdict of one that reads no variable
        while the constants it reads keep their values (`CONST_READS`)."""
        acc = set() if acc is None else acc
        seen = set() if seen is None else seen
        if isinstance(node, str):
            self._read_name(node, acc, seen, kind)
        elif isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            for x in node:
                self.reads(x, acc, seen, kind)
        elif hasattr(node, "_fields"):
            if _k(node) == "OperatorApplication" and isinstance(node.operator, str):
                self._read_name(node.operator, acc, seen, kind)
            for f in node._fields:
                if f not in ("start", "end", "symbol"):
                    self.reads(getattr(node, f), acc, seen, kind)
        return acc

    def _read_name(self, name: str, acc: set, seen: set, kind: str) -> None:
        r = self.resolve(name, Env())
        if isinstance(r, tuple) and r[0] == kind:
            acc.add(self.model.variables[r[1]] if kind == "var" else r[1])
        elif isinstance(r, OpDef) and name not in seen:
            seen.add(name)
            self.reads(r.body, acc, seen, kind)

    # ------------------------------------------------------------- incremental forms
    def _const_domain(self, node) -> str | None:
        """The name of a zero-arity constant-level set (a CONSTANT or a constant definition)."""
        node = _strip(node)
        if _k(node) != "OperatorApplication" or node.arguments or not isinstance(node.operator, str):
            return None
        r = self.resolve(node.operator, Env())
        if isinstance(r, OpDef) and not r.params and not r.is_fn and self.is_const_def(r):
            return node.operator
        if isinstance(r, tuple) and r[0] == "const":
            return node.operator
        return None

    def local_conjunct(self, c, env: Env, var: str | None = None):
        """(domain, predicate code of one element named `var`) when conjunct `c` holds iff it
        holds for each element of one constant domain separately: `\\A x \\in Dom : P(x)`
        (x a plain name), or `f \\in [Dom -> S]` read element-wise (the caller guarantees
        DOMAIN f = Dom, as a refinement map that builds f over Dom does). Otherwise None.

        Why this is sound for incremental checking: such a conjunct is a conjunction over
        the elements, so if it held on the last checked state and an element's predicate reads
        nothing that changed since, that element still satisfies it; checking the elements a
        map reports dirty (every element whose inputs changed) decides the whole conjunct.
        """
        c = _strip(c)
        k = _k(c)
        if k == "Quantification" and c.quantifier == "\\A" and len(c.declarations) == 1:
            d = c.declarations[0]
            if _k(d) == "OperatorApplication" and d.operator == "\\in" and len(d.arguments) == 2:
                dom = self._const_domain(d.arguments[1])
                pat = _strip(d.arguments[0])
                if dom is not None and _k(pat) == "OperatorApplication" and not pat.arguments:
                    v = var or self.fresh(_pyname("v_", pat.operator) + "_")
                    return dom, v, self.e(c.predicate, env.bind((pat.operator, "val", v)))
        f, fs = _in_function_set(c)
        if fs is not None:
            dom = self._const_domain(fs.domain)
            if dom is not None:
                v = var or self.fresh("x_")
                return dom, v, self.member(f"ap({self.e(f, env)}, {v})", fs.codomain, env)
        return None

    def fcn_domain(self, c):
        """For a conjunct `f \\in [Dom -> S]` (the element-wise form local_conjunct reads with
        DOMAIN f = Dom taken as given): (f's name when f is a plain state variable, else None;
        Dom). None for any other conjunct, whose element predicate takes nothing as given."""
        f, fs = _in_function_set(c)
        if fs is None:
            return None
        f = _strip(f)
        plain = _k(f) == "OperatorApplication" and not f.arguments and f.operator in self.model.variables
        return (f.operator if plain else None, self._const_domain(fs.domain))

    def incremental_fn(self, name: str, body, mod) -> list[str]:
        """`inc_<Inv>(C, s, D, V=None)`: the invariant with each element-local conjunct
        evaluated only over `D[domain]` (the dirty elements), the other conjuncts in full;
        V, when given, the set of variables that changed since the state on which the
        invariant last held: a conjunct reading none of them still holds and is skipped.

        A fast path first (`inc_all` with the other invariants skipped: one loop per domain
        checks every local conjunct of an element together; the conjuncts are side-effect
        free, so their order cannot change a TRUE result); only when that fails or raises
        does the conjunct-by-conjunct form run (in full over D, skipping nothing), so a
        failure names the first failing conjunct exactly as `inv_<Inv>` would."""
        self.uniq = 0
        env = Env(t=None)
        conj = self.conjuncts(body)
        parts = [self.local_conjunct(c, env) for c in conj]
        domains = tuple(sorted({p[0] for p in parts if p is not None}))
        if not domains:
            return []
        self.incremental[name] = domains
        given = [self.fcn_domain(c) for c, p in zip(conj, parts) if p is not None]
        given = [g for g in given if g is not None]
        self.fcn_domains[name] = None if any(v is None for v, _ in given) else tuple(given)
        fname = _pyname("inc_", name)
        table = _pyname("_T_inv_", name)
        reads_table = _pyname("_R_inv_", name)
        variables = list(self.model.variables)
        reads = [tuple(v for v in variables if v in self.reads(c)) for c in conj]

        def changed(i: int) -> str:
            r = reads[i]
            if not r:
                return "V is None"
            if len(r) == 1:
                return f"V is None or {r[0]!r} in V"
            return f"V is None or not V.isdisjoint({reads_table}[{i}])"

        entries = []
        for i, (c, part) in enumerate(zip(conj, parts)):
            if part is None:
                entries.append(_FastConjunct(f"_u{i}", changed(i), None, self.e(c, env)))
            else:
                var = _pyname("e_", part[0])
                entries.append(_FastConjunct(f"_u{i}", changed(i), part[0],
                                             self.local_conjunct(c, env, var)[2]))
        self.inc_entries[name] = (reads_table, reads, entries)
        out = [f"{reads_table} = (\n" + "".join(f"    frozenset({r!r}),\n" for r in reads) + ")\n\n\n",
               f"def {fname}(C, s, D, V=None):\n",
               f"    \"\"\"{name} over the elements D[domain] of {', '.join(domains)} only, skipping the conjuncts\n"
               f"    that read no variable in V (see inv_{name}).\"\"\"\n",
               # the fast path is inc_all's with every other invariant skipped; when it does
               # not hold, the conjunct-by-conjunct form below decides and names the failure
               f"    if inc_all(C, s, D, V, _OTHERS[{name!r}]):\n",
               "        return None\n",
               "    k = 0\n    try:\n"]
        for i, (c, part) in enumerate(zip(conj, parts), 1):
            if part is None:
                code = self.e(c, env)
            else:
                dom, v, pred = part
                code = f"all({pred} for {v} in it(D[{dom!r}]))"
            out.append(f"        # {self.loc(c, mod)}{' (element-local)' if part is not None else ''}\n")
            out.append(f"        k = {i}\n")
            out.append(f"        if not {code}:\n")
            out.append(f"            return Failure({name!r}, {i}, *{table}[{i - 1}])\n")
        out.append("    except Exception as e:  # an evaluation error fails the conjunct it happened in\n")
        out.append(f"        return conj_error({name!r}, {table}, k, e)\n")
        out.append("    return None\n\n\n")
        return out

    def fused_fn(self) -> list[str]:
        """`inc_all(C, s, D, V=None, skip=frozenset())`: the fast paths of every incremental
        form in one pass, one loop per domain over the local conjuncts of all of them (one
        walk of the dirty elements instead of one per invariant). True: every conjunct of
        every invariant not in `skip` holds (over D, skipping what reads nothing in V, as
        inc_<I> does); False: one may not, and the inc_<I> forms decide and name it."""
        if not self.inc_entries:
            return []
        names = list(self.inc_entries)
        entries = []
        for n, name in enumerate(names):
            for en in self.inc_entries[name][2]:
                entries.append(_FastConjunct(f"_u{n}_{en.guard[2:]}", f"_k{n} and ({en.cond})", en.domain,
                                             self._inline_defs(en.code)))
        out = ["#: invariant -> the other incremental invariants (inc_<I>'s fast path skips them)\n_OTHERS = {\n"]
        out += [f"    {name!r}: frozenset({tuple(n for n in names if n != name)!r}),\n" for name in names]
        out += ["}\n\n\n",
                "def inc_all(C, s, D, V=None, skip=frozenset()):\n",
               f"    \"\"\"The fast paths of {', '.join(names)} in one pass (see codegen.fused_fn).\"\"\"\n",
               "    try:\n"]
        out += [f"        _k{n} = {name!r} not in skip\n" for n, name in enumerate(names)]
        out += _fast_path(entries, "        ")
        out += ["        return True\n",
                "    except Exception:  # FALSE or an error: the inc_<I> forms decide\n",
                "        return False\n\n\n"]
        return out

    def _inline_defs(self, code: str) -> str:
        """Fast-path `code` with each call of a one-parameter state-level definition on a
        plain name replaced by the definition's body, where that body is one short
        expression calling nothing but state functions (InTree(n) == n < len): the fast
        path then evaluates it in place of a Python call per element. The exact forms keep
        the call (and the definition's spec location); the body is the same translation as
        the function's, its parameter bound to the argument, so both decide alike."""
        by_py = {_pyname("d_", n): d for n, d in self.defs_needed.items()}

        def sub(m) -> str:
            d = by_py.get(m.group(1))
            body = self._inline_body(d) if d is not None else None
            return m.group(0) if body is None else f"({body.replace(_INLINE_PARAM, m.group(2))})"
        return _DEF_CALL.sub(sub, code)

    def _inline_body(self, d) -> str | None:
        """The body of definition `d` as an expression of its one parameter (named
        _INLINE_PARAM), or None when it is not that simple (see _inline_defs)."""
        if d.name in self._inlined:
            return self._inlined[d.name]
        body = None
        if len(d.params) == 1 and not d.is_fn and not d.is_instance and not d.params[0][1]:
            uniq = self.uniq
            try:
                code = self.e(d.body, Env(((d.params[0][0], "val", _INLINE_PARAM),), t=None))
            except Exception:        # (what the translation refuses stays a call)
                code = None
            finally:
                self.uniq = uniq
            # (a state function's application is no call there: the fast path reads it through
            # its hoisted dict lookup, `_hoist_fast`)
            if code is not None and len(code) <= 120 and not _CALL.search(_FAST_AP.sub("", code)):
                body = code
        self._inlined[d.name] = body
        return body

    # ------------------------------------------------------------- module
    def generate(self) -> tuple[str, SpecInfo]:
        m = self.model
        variables = list(m.variables)
        consts = [n for n, _, _ in self.root.constants]
        cfg_path = self.spec_path.with_suffix(".cfg")
        cfg = load_cfg(cfg_path)
        init_node, init_ctx, next_node, next_ctx = _split_spec(m, cfg.specification or "Spec")
        next_default = next_node.operator if _k(next_node) == "OperatorApplication" and \
            isinstance(next_node.operator, str) and not next_node.arguments else "Next"
        action_defs: dict[str, OpDef] = {}
        next_of: dict[str, list] = {}
        self.uniq = 0
        for name, code, d in self.split_next(next_node, Env(), next_default):
            next_of.setdefault(name, []).append(code)
            if d is not None:
                action_defs.setdefault(name, d)
        invs = [n for n in self.want_invariants]
        for n in invs:
            if not isinstance(self.scope.entries.get(n), OpDef):
                raise SemanticError(f"invariant {n} is not defined", node_loc(self.root.file, self.root.ast))

        body: list[str] = []
        # actions: conjunct-located checks, and one any-binding check per Next leaf
        act_names = sorted(action_defs, key=lambda n: self.line(action_defs[n].node, action_defs[n].module))
        for name in act_names:
            d = action_defs[name]
            items = [(p, "val", _pyname("v_", p)) for p, _ in d.params]
            env = Env(tuple(items))
            sig = "C, s, t" + "".join(", " + py for _, _, py in items)
            body += self.checked_fn(_pyname("act_", name), name, items, d.body, env, sig, d.module)
        for name in sorted(next_of, key=lambda n: (n not in action_defs, act_names.index(n) if n in action_defs else 0, n)):
            parts = next_of[name]
            body.append(f"def {_pyname('next_', name)}(C, s, t):\n")
            body.append(f"    \"\"\"Some binding of {name}'s parameters allows s -> t (a disjunct of Next).\"\"\"\n")
            body.append(f"    return bool({' or '.join(parts)})\n\n\n")
        for name in invs:
            d = self.scope.entries[name]
            body += self.checked_fn(_pyname("inv_", name), name, [], d.body, Env(t=None), "C, s", d.module)
            body += self.incremental_fn(name, d.body, d.module)
        body += self.fused_fn()
        # Init as a state predicate (monitors check the first mapped state against it)
        self.uniq = 0
        body.append("def init_ok(C, s):\n    \"\"\"s satisfies Init.\"\"\"\n")
        body.append(f"    return bool({self.e(init_node, Env(t=None))})\n\n\n")

        assumes = []
        self.no_hoist = True     # constants() evaluates these before any hoisted set
        for expr, ctx in m.assumes:
            self.uniq = 0
            assumes.append((self.text(expr, ctx.module), self.loc(expr, ctx.module), self.e(expr, Env(t=None))))
        self.no_hoist = False
        # definitions used by the above (transitively): state-level ones as functions, in
        # source order; constant-level zero-arity ones evaluated once per constants binding.
        # Translating one may need others of either kind: iterate to a fixpoint.
        defs_out: dict[str, str] = {}
        const_code: dict[str, tuple] = {}
        while True:
            todo = [n for n in self.defs_needed if n not in defs_out]
            ctodo = [n for n in self.const_needed if n not in const_code]
            if not todo and not ctodo:
                break
            for n in todo:
                d = self.defs_needed[n]
                items = [(p, "val", _pyname("v_", p)) for p, _ in d.params]
                if d.is_fn:
                    self.unsupported("recursive function definition", d.node)
                self.uniq = 0
                code = self.e(d.body, Env(tuple(items)))
                sig = "C, s, t" + "".join(", " + py for _, _, py in items)
                defs_out[n] = (f"def {_pyname('d_', n)}({sig}):\n"
                               f"    # {self.loc(d.node, d.module)}\n"
                               f"    return {code}\n\n\n")
            for n in ctodo:
                d = self.scope.entries[n]
                self.uniq = 0
                self.no_hoist = True
                try:
                    const_code[n] = (self.e(d.body, Env(t=None)), self.loc(d.node, d.module),
                                     self.line(d.node, d.module))
                finally:
                    self.no_hoist = False
        order = sorted(defs_out, key=lambda n: self.line(self.defs_needed[n].node, self.defs_needed[n].module))
        const_defs = [(n, c, lc) for n, (c, lc, _) in sorted(const_code.items(), key=lambda kv: kv[1][2])]
        head = [
            f'"""GENERATED by hicache gen from {self.rel} \u2014 do not edit.\n\n',
            f"Monitor checks of module {self.root.name}: act_<Action>(C, s, t, *params) and\n",
            "inv_<Invariant>(C, s) return None or the first failing conjunct (a Failure naming its\n",
            "spec location); next_<Action>(C, s, t) tries every binding of the action's parameters.\n",
            "C is `constants(raw)`; a state is a dict variable -> value (hicache.tla.values).\n",
            '"""\n',
            "# flake8: noqa\n",
            "{IMPORTS}",
            f"SPEC = {self.rel!r}\n",
            f"MODULE = {self.root.name!r}\n",
            f"VARIABLES = {tuple(variables)!r}\n",
            f"CONSTANTS = {tuple(consts)!r}\n\n",
        ]
        for b in sorted(self.builtins_used):
            head.append(f"{self.builtin_alias(b)} = BI[{b!r}]\n")
        head.append("\n\n")
        cons = ["def constants(raw: dict) -> dict:\n",
                "    \"\"\"The constants binding: the given CONSTANTS, checked against the ASSUMEs, and every\n",
                "    constant-level definition evaluated once.\"\"\"\n",
                "    missing = [n for n in CONSTANTS if n not in raw]\n",
                "    if missing:\n",
                "        raise ValueError(f\"constants: missing {', '.join(missing)}\")\n",
                "    C = dict(raw)\n",
                "    s = None  # constant-level definitions read no state (their t is None)\n"]
        for name, code, loc in const_defs:
            cons.append(f"    C[{name!r}] = {code}  # {loc}\n")
        for text, loc, code in assumes:
            cons.append(f"    if not {code}:\n")
            cons.append(f"        raise ValueError({('constants violate ASSUME at ' + loc + ': ' + text)!r})\n")
        for code, key in self.hoisted.items():
            cons.append(f"    C[{key!r}] = {code}\n")
        for key in sorted(self.member_flags):
            # (in_c's flag: membership in a constant set holding no boolean is Python's `in`)
            cons.append(f"    C[{key + '!'!r}] = bool_free(C[{key!r}])\n")
        cons.append("    return C\n\n\n")
        tail = ["#: action name -> (check, parameter names)\n", "ACTIONS = {\n"]
        for name in act_names:
            d = action_defs[name]
            tail.append(f"    {name!r}: ({_pyname('act_', name)}, {tuple(p for p, _ in d.params)!r}),\n")
        tail.append("}\n\n#: action name -> any-binding check (the disjuncts of Next)\nNEXT = {\n")
        for name in sorted(next_of):
            tail.append(f"    {name!r}: {_pyname('next_', name)},\n")
        tail.append("}\n\n#: invariant name -> check\nINVARIANTS = {\n")
        for name in invs:
            tail.append(f"    {name!r}: {_pyname('inv_', name)},\n")
        tail.append("}\n\n#: invariant name -> the state variables it reads (through its definitions): an\n"
                    "#: invariant holding on a state still holds after steps that changed none of them\n"
                    "READS = {\n")
        for name in invs:
            order_ = [v for v in variables if v in self.reads(self.scope.entries[name].body)]
            tail.append(f"    {name!r}: frozenset({tuple(order_)!r}),\n")
        tail.append("}\n\n#: invariant name -> the CONSTANTS it reads (through its definitions): an invariant\n"
                    "#: reading no variable keeps its verdict while these keep their values\n"
                    "CONST_READS = {\n")
        for name in invs:
            order_ = [c for c in consts if c in self.reads(self.scope.entries[name].body, kind="const")]
            tail.append(f"    {name!r}: frozenset({tuple(order_)!r}),\n")
        tail.append("}\n\n#: invariant name -> (incremental check inc_<Inv>(C, s, D), domains it is element-local in)\n")
        tail.append("INCREMENTAL = {\n")
        for name in invs:
            if name in self.incremental:
                tail.append(f"    {name!r}: ({_pyname('inc_', name)}, {self.incremental[name]!r}),\n")
        tail.append("}\n")
        tail.append("\n#: invariant -> (variable, Dom) of each element-wise `f \\in [Dom -> S]` conjunct of its\n"
                    "#: incremental form, which takes DOMAIN f = Dom as given (a map keeping f over Dom\n"
                    "#: guarantees it; a state mapped from scratch is tested first, rt.domain_is); None:\n"
                    "#: such an f is no plain variable (the exact forms only)\n")
        tail.append("FCN_DOMAINS = {\n")
        for name in invs:
            if name in self.incremental:
                tail.append(f"    {name!r}: {self.fcn_domains[name]!r},\n")
        tail.append("}\n")
        rest = "".join(cons + [defs_out[n] for n in order] + body + tail)
        head_s = "".join(head)
        used = sorted(n for n in _RT_NAMES if re.search(r"\b" + n + r"[(\[]", head_s + rest))
        imports = "from hicache.monitors.rt import " + ", ".join(used) + "\n\n"
        src = head_s.replace("{IMPORTS}", imports) + rest
        info = SpecInfo(self.root.name, self.rel, consts, variables, invs, src, act_names)
        return src, info


def module_name(spec_name: str) -> str:
    """HostTier -> host_tier (the generated module's file name)."""
    out = []
    for i, c in enumerate(spec_name):
        if c.isupper() and i and (not spec_name[i - 1].isupper() or
                                  (i + 1 < len(spec_name) and spec_name[i + 1].islower())):
            out.append("_")
        out.append(c.lower())
    name = "".join(out)
    return name + "_" if keyword.iskeyword(name) else name


def cfg_invariants(spec_path: Path) -> list[str]:
    """Invariants to generate: those of X.cfg, then any extra ones named by X_*.cfg."""
    spec_path = Path(spec_path)
    names: list[str] = []
    cfgs = [spec_path.with_suffix(".cfg")] + sorted(spec_path.parent.glob(spec_path.stem + "_*.cfg"))
    for c in cfgs:
        if c.exists():
            for n in load_cfg(c).invariants:
                if n not in names:
                    names.append(n)
    return names


def generate(spec_path: Path, rel: str) -> tuple[str, SpecInfo]:
    return Generator(spec_path, rel, cfg_invariants(spec_path)).generate()
