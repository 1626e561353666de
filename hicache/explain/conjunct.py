"""Which part of a predicate is false, quoted from the spec with its file:line.

`failing_part` walks a false predicate down to the smallest part that is still false:
  a conjunction            -> its first false conjunct
  \\A x \\in S : P          -> the first x (in TLC's enumeration order) making P false,
                              recorded as a binding, then P
  A => B                   -> B (A is true when A => B is false)
  a zero-arity definition  -> its body (one level per step of the walk)
and stops at anything else, or at a part it cannot evaluate. The reported conjunct is the
deepest false conjunct on that walk (or the innermost part when the walk passed through
no conjunction below the top). Evaluation is the interpreter's own (hicache.tla.compiler),
on one state (invariants) or a pair of states (actions: primed variables read the second).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from hicache.tla.compiler import Compiler, Ctx, Lazy, OpDef
from hicache.tla.loader import node_loc
from hicache.tla.values import fmt

_MAX_DEPTH = 16
_REPO = Path(__file__).resolve().parents[2]


@dataclass(slots=True)
class Part:
    text: str          # source text, as written in the spec
    location: str      # spec/X.tla:line:col


@dataclass(slots=True)
class Finding:
    """The false part of a predicate: the conjunct to quote and how it was reached."""
    conjunct: Part
    top: Part                                          # the predicate's definition
    bindings: dict[str, str] = field(default_factory=dict)   # bound name -> TLA+ value
    path: list[Part] = field(default_factory=list)     # the false parts walked, outermost first


def display_path(file: str) -> str:
    """A spec path as a user types it: relative to the current directory or the repository."""
    p = Path(file).resolve()
    for base in (Path.cwd(), _REPO):
        try:
            return str(p.relative_to(base.resolve()))
        except ValueError:
            continue
    return str(p)


@lru_cache(maxsize=32)
def _lines(file: str) -> tuple[str, ...]:
    return tuple(Path(file).read_text().splitlines())


def source_text(file: str, node) -> str:
    """The node's text (0-based start/end positions, end column exclusive), continuation
    lines dedented to the start column so a multi-line conjunct keeps its layout."""
    start, end = getattr(node, "start", None), getattr(node, "end", None)
    if start is None or end is None:
        return "<no source position>"
    lines = _lines(file)
    if start.line == end.line:
        return lines[start.line][start.column:end.column]
    out = [lines[start.line][start.column:]]
    for ln in range(start.line + 1, end.line + 1):
        text = lines[ln] if ln < end.line else lines[ln][:end.column]
        strip = min(start.column, len(text) - len(text.lstrip(" ")))
        out.append(text[strip:])
    return "\n".join(out).rstrip()


def part(file: str, node) -> Part:
    loc = node_loc(file, node)
    return Part(source_text(file, node), f"{display_path(loc.file)}:{loc.line}:{loc.col}")


def _kind(node) -> str:
    return type(node).__name__


def _conj_items(node) -> list | None:
    k = _kind(node)
    if k == "VerticalList" and node.operator in ("/\\", "\\land"):
        return [it.expression for it in node.arguments]
    if k == "OperatorApplication" and node.operator in ("/\\", "\\land") and node.arguments:
        return list(node.arguments)
    return None


class _Walker:
    def __init__(self, comp: Compiler, st: tuple, pr: tuple | None):
        self.comp, self.st, self.pr = comp, st, pr

    def value(self, node, ctx: Ctx, env: tuple):
        try:
            return self.comp.value(node, ctx)[0](self.st, self.pr, env)
        except Exception:  # noqa: BLE001 - a part that cannot be evaluated ends the walk there
            return None

    def walk(self, node, ctx: Ctx, env: tuple, f: Finding, depth: int = 0):
        """Follow the false part of `node` (known false); returns the innermost node."""
        while _kind(node) == "Parentheses":
            node = node.expression
        if depth >= _MAX_DEPTH:
            return node, ctx
        file = ctx.module.file
        items = _conj_items(node)
        if items is not None:
            for it in items:
                if self.value(it, ctx, env) is False:
                    f.path.append(part(file, it))
                    f.conjunct = f.path[-1]
                    return self.walk(it, ctx, env, f, depth + 1)
            return node, ctx
        k = _kind(node)
        if k == "Quantification" and node.quantifier == "\\A":
            try:
                bounds = self.comp.bounds(node.declarations, ctx)
                if not all(isinstance(p, str) for p, _ in bounds):
                    return node, ctx
                names = [p for p, _ in bounds]
                sets = self.comp.bound_sets(bounds, ctx)
                inner = ctx.bind(*names)
                for env2 in self.comp.iter_bind(bounds, sets, self.st, self.pr, env):
                    if self.value(node.predicate, inner, env2) is False:
                        for n, x in zip(names, env2[len(env):]):
                            f.bindings[n] = fmt(x)
                        f.path.append(part(file, node.predicate))
                        return self.walk(node.predicate, inner, env2, f, depth + 1)
            except Exception:  # noqa: BLE001 - an unevaluable bound ends the walk
                pass
            return node, ctx
        if k == "Let":
            return self._let(node, ctx, env, f, depth)
        if k == "Cases":
            for arm in node.cases:
                if self.value(arm.predicate, ctx, env) is True:
                    f.path.append(part(file, arm.expression))
                    return self.walk(arm.expression, ctx, env, f, depth + 1)
            if node.other is not None:
                f.path.append(part(file, node.other))
                return self.walk(node.other, ctx, env, f, depth + 1)
            return node, ctx
        if k == "OperatorApplication" and node.operator in ("=>", "\\implies") and len(node.arguments) == 2:
            rhs = node.arguments[1]
            f.path.append(part(file, rhs))
            return self.walk(rhs, ctx, env, f, depth + 1)
        if k == "OperatorApplication" and isinstance(node.operator, str) and not node.arguments \
                and not any(n == node.operator for n, _ in ctx.names):
            d = ctx.scope.entries.get(node.operator)
            if isinstance(d, OpDef) and not d.params and not d.is_instance and not d.is_fn:
                f.path.append(part(d.module.file, d.body))
                return self.walk(d.body, Ctx(d.scope, module=d.module), (), f, depth + 1)
        return node, ctx


    def _let(self, node, ctx: Ctx, env: tuple, f: Finding, depth: int):
        """Into a LET body, its zero-arity definitions bound (and shown) as evaluated here."""
        try:
            inner, pushes = self.comp.let_ctx(node, ctx)
            env2 = env
            for kind, code, _ in pushes:
                if kind == "lazy":
                    env2 = env2 + (Lazy(code, self.st, self.pr, env2),)
                else:
                    _, env2 = code(self.st, self.pr, env2 + (None,))
            for (name, kind), x in zip(inner.names[len(env):], env2[len(env):]):
                if kind == "lazy":
                    f.bindings[name] = fmt(x.force(x.pr))
        except Exception:  # noqa: BLE001 - a LET that cannot be evaluated ends the walk
            return node, ctx
        f.path.append(part(ctx.module.file, node.expression))
        return self.walk(node.expression, inner, env2, f, depth + 1)


def failing_part(comp: Compiler, d: OpDef, st: tuple, pr: tuple | None = None,
                 args: tuple = ()) -> Finding | None:
    """The false part of definition `d` (an invariant on `st`, or an action on `st -> pr`
    with its parameters bound to `args`); None when `d` is not false there."""
    ctx = Ctx(d.scope, tuple((p, "val") for p, _ in d.params), module=d.module)
    w = _Walker(comp, st, pr)
    if w.value(d.body, ctx, tuple(args)) is not False:
        return None
    top = part(d.module.file, d.body)
    f = Finding(conjunct=top, top=top)
    for (p, _), a in zip(d.params, args):
        f.bindings[p] = fmt(a)
    w.walk(d.body, ctx, tuple(args), f)
    if f.conjunct is top and f.path:
        # no conjunction below the top: quote the innermost false part reached
        f.conjunct = f.path[-1]
    return f


def conjunct_count_true(comp: Compiler, d: OpDef, st: tuple, pr: tuple, args: tuple) -> tuple[int, int]:
    """(leading, all) top-level conjuncts of action `d` that hold for `args`: the binding
    that comes closest to allowing a step passes the most leading ones, then the most."""
    ctx = Ctx(d.scope, tuple((p, "val") for p, _ in d.params), module=d.module)
    body = d.body
    while _kind(body) == "Parentheses":
        body = body.expression
    items = _conj_items(body) or [body]
    w = _Walker(comp, st, pr)
    lead, total, leading = 0, 0, True
    for it in items:
        ok = w.value(it, ctx, tuple(args)) is True
        leading = leading and ok
        lead += leading
        total += ok
    return lead, total





def _children(node):
    """Sub-nodes of a parser node (named tuples, and lists of them)."""
    items = [getattr(node, f) for f in node._fields] if hasattr(node, "_fields") else node
    for x in items:
        if hasattr(x, "_fields"):
            yield x
        elif isinstance(x, (list, tuple)):
            yield from _children(x)


def quote_location(file: str, ast, line: int, col: int) -> str | None:
    """The source text of the outermost expression starting at 1-based line:col (a location
    another tool recorded), with the spec's own layout; None when no node starts there."""
    todo = [ast]
    while todo:
        node = todo.pop(0)     # breadth-first: the outermost node at that place comes first
        start = getattr(node, "start", None)
        if start is not None and (start.line + 1, start.column + 1) == (line, col) \
                and type(node).__name__ not in ("OperatorDefinition", "Module"):
            return source_text(file, node)
        todo.extend(_children(node))
    return None


__all__ = ["Finding", "Part", "failing_part", "conjunct_count_true", "display_path", "source_text", "part",
           "quote_location"]
