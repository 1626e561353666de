"""Load TLA+ modules: parse with the PyPI `tla` package, resolve EXTENDS and INSTANCE.

The parser prints diagnostics on stdout; we capture them and turn a failure into a
located ParseError (file:line:col, 1-based). Standard modules (Naturals, Sequences, TLC,
...) are built in (see hicache.tla.stdlib) and need no file.
"""
from __future__ import annotations

import ast
import contextlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import tla

from hicache.tla.errors import Loc, ParseError, SemanticError
from hicache.tla.precedence import check_precedence

#: Modules implemented natively; EXTENDS/INSTANCE of these loads no file.
STANDARD_MODULES = frozenset({
    "Naturals", "Integers", "Sequences", "FiniteSets", "TLC", "Bags", "TLCExt",
    "SequencesExt", "Functions", "Folds", "FiniteSetsExt", "Reals", "Randomization",
})

_NEXT_SYM = re.compile(r"Next symbol in input:\s*\n\s*Result\(symbol='(\w+)', value=(.*?), line=(\d+), column=(\d+)")
_TOP_POS = re.compile(r"Top of stack `results` has end line: (\d+), and column: (\d+)")
_MODULE_HEADER = re.compile(r"^-{4,}\s*MODULE\s+(\w+)\s*-{4,}", re.M)


@dataclass(slots=True)
class Module:
    """One parsed module, its units sorted by kind (definitions keep source order)."""
    name: str
    file: str
    ast: object
    extends: list[str] = field(default_factory=list)
    constants: list[tuple[str, int, object]] = field(default_factory=list)  # (name, arity, node)
    variables: list[tuple[str, object]] = field(default_factory=list)
    units: list = field(default_factory=list)   # definitions, instances, assumes, theorems in order
    recursive: set[str] = field(default_factory=set)

    def loc(self, node) -> Loc:
        return node_loc(self.file, node)


def node_loc(file: str, node) -> Loc:
    start = getattr(node, "start", None)
    end = getattr(node, "end", None)
    if start is None:
        return Loc(file, 0, 0)
    return Loc(file, start.line + 1, start.column + 1,
               (end.line + 1) if end else 0, (end.column + 1) if end else 0)


def parse_text(text: str, file: str):
    """Parse a module's text; raise ParseError located at the offending token."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            tree = tla.parse(text)
    except Exception as exc:  # the parser raises ValueError/AssertionError/others
        noise = buf.getvalue()
        m = _NEXT_SYM.search(noise)
        if m:
            line, col = int(m.group(3)) + 1, int(m.group(4)) + 1
            raise ParseError(f"syntax error at {_token_text(m.group(2))}", Loc(file, line, col)) from None
        m = _TOP_POS.search(noise)
        if m:
            raise ParseError("syntax error (unexpected end of input or construct)",
                             Loc(file, int(m.group(1)) + 1, int(m.group(2)) + 1)) from None
        if not _MODULE_HEADER.search(text):
            raise ParseError("no `---- MODULE Name ----` header found", Loc(file, 1, 1)) from None
        raise ParseError(f"cannot parse: {exc}", Loc(file, 1, 1)) from None
    check_precedence(tree, text, file)     # (the parser groups what SANY rejects)
    return tree


def _module_name_loc(text: str, file: str, name: str) -> Loc:
    """Where the top module's header names it (text before the header is allowed)."""
    m = re.search(r"^-{4,}[ \t]*MODULE[ \t]+(" + re.escape(name) + r")\b", text, re.M)
    if not m:
        return Loc(file, 1, 1)
    line = text.count("\n", 0, m.start(1)) + 1
    return Loc(file, line, m.start(1) - (text.rfind("\n", 0, m.start(1)) + 1) + 1)


def _token_text(value: str) -> str:
    """The offending token as written in the spec: the parser reports it as a Python repr
    (backslashes doubled), with a symbol class (NAME for a conjunction bullet) that says
    nothing to a reader."""
    try:
        text = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    return f"`{text}`" if isinstance(text, str) else repr(text)


def _index_module(tree, file: str) -> Module:
    mod = Module(name=tree.name, file=file, ast=tree)
    for e in tree.extendees or []:
        mod.extends.append(e if isinstance(e, str) else getattr(e, "name", None) or e.operator)
    for u in tree.units or []:
        kind = type(u).__name__
        if kind == "Constants":
            for n in u.names:
                if type(n).__name__ == "OperatorApplication":
                    arity = len(n.arguments) if n.arguments else 0
                    mod.constants.append((n.operator, arity, n))
                elif type(n).__name__ == "OperatorDeclaration":
                    mod.constants.append((n.name, 0, n))
                else:
                    mod.constants.append((getattr(n, "name", str(n)), 0, n))
        elif kind == "Variables":
            for n in u.names:
                mod.variables.append((n.operator if hasattr(n, "operator") else str(n), n))
        elif kind == "RecursiveOperators":
            for n in u.names:
                mod.recursive.add(n.operator)
                mod.units.append(u)
        elif kind in ("OperatorDefinition", "Instance", "Axiom", "Theorem", "Module"):
            mod.units.append(u)
        elif kind == "DashLine" or kind == "Define":
            continue
        # proofs, USE/HIDE and other proof-language units carry no model semantics
    return mod


class Loader:
    """Finds and parses modules by name; caches them; detects EXTENDS cycles."""

    def __init__(self, search_dirs: list[Path]):
        self.search_dirs = [Path(d) for d in search_dirs]
        self.modules: dict[str, Module] = {}
        self._loading: set[str] = set()

    def load_file(self, path: Path) -> Module:
        path = Path(path)
        if not path.exists():
            raise ParseError(f"no such file {path}", Loc(str(path), 0, 0))
        text = path.read_text()
        tree = parse_text(text, str(path))
        if tree.name != path.stem:
            # SANY aborts on it ("File name ... does not match the name ... of the top level
            # module"); EXTENDS finds a module by its file name, so the two must agree
            raise ParseError(f"module {tree.name} is in file {path.name}: a module's name must match its file "
                             f"name (MODULE {path.stem})", _module_name_loc(text, str(path), tree.name))
        mod = _index_module(tree, str(path))
        self.modules[mod.name] = mod
        self._register_inner(mod)
        return mod

    def _register_inner(self, mod: Module) -> None:
        for u in mod.units:
            if type(u).__name__ == "Module":
                inner = _index_module(u, mod.file)
                self.modules.setdefault(inner.name, inner)
                self._register_inner(inner)

    def get(self, name: str, used_at: Loc | None = None) -> Module | None:
        """The module named `name`, or None for a standard module."""
        if name in self.modules:
            return self.modules[name]
        for d in self.search_dirs:
            p = d / f"{name}.tla"
            if p.exists():
                return self.load_file(p)
        if name in STANDARD_MODULES:
            return None
        raise SemanticError(f"cannot find module {name} (searched {', '.join(map(str, self.search_dirs))})",
                            used_at)
