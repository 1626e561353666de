"""The TLC model-configuration language (.cfg).

Sections: CONSTANT(S) (`N = 3`, `Procs = {p1, p2}`, `Nil = Nil`, `Op <- Def`,
`Op <- [Mod] Def`), INIT, NEXT, SPECIFICATION, INVARIANT(S), PROPERTY/PROPERTIES,
CONSTRAINT(S), ACTION_CONSTRAINT(S), SYMMETRY, VIEW, CHECK_DEADLOCK, ALIAS, POSTCONDITION.
Identifiers on the right of `=` that are not numbers, strings or booleans are model values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache.tla.errors import ConfigError, EvalError, Loc
from hicache.tla.values import ModelValue, set_of

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<lcomment>\\\*[^\n]*)
  | (?P<bcomment>\(\*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>-?\d+)
  | (?P<arrow><-)
  | (?P<punct>[{}\[\],=])
  | (?P<ident>[A-Za-z_][A-Za-z0-9_!]*)
""", re.X)

_SECTIONS = {
    "CONSTANT": "constants", "CONSTANTS": "constants",
    "INIT": "init", "NEXT": "next", "SPECIFICATION": "specification",
    "INVARIANT": "invariants", "INVARIANTS": "invariants",
    "PROPERTY": "properties", "PROPERTIES": "properties",
    "CONSTRAINT": "constraints", "CONSTRAINTS": "constraints",
    "ACTION_CONSTRAINT": "action_constraints", "ACTION_CONSTRAINTS": "action_constraints",
    "SYMMETRY": "symmetry", "VIEW": "view", "CHECK_DEADLOCK": "check_deadlock",
    "ALIAS": "alias", "POSTCONDITION": "postcondition",
}


@dataclass
class Config:
    file: str = "<none>"
    constants: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)   # Op <- Def
    init: str | None = None
    next: str | None = None
    specification: str | None = None
    invariants: list[str] = field(default_factory=list)
    properties: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    action_constraints: list[str] = field(default_factory=list)
    symmetry: str | None = None
    view: str | None = None
    check_deadlock: bool = True
    alias: str | None = None
    postcondition: str | None = None
    locs: dict[str, Loc] = field(default_factory=dict)   # where each definition name appears
    # where each constant is assigned (`N = 3` or `N <- Def`), at its name: callers that
    # reject a value or an undeclared name point there
    constant_locs: dict[str, Loc] = field(default_factory=dict)


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    col: int


def _tokenize(text: str, file: str) -> list[_Tok]:
    toks = []
    pos, line, col = 0, 1, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ConfigError(f"unexpected character {text[pos]!r}", Loc(file, line, col))
        kind = m.lastgroup
        s = m.group()
        if kind == "bcomment":
            depth, j = 1, m.end()
            while depth and j < len(text):
                if text.startswith("(*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*)", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise ConfigError("unterminated comment", Loc(file, line, col))
            s = text[pos:j]
            end = j
        else:
            end = m.end()
        if kind not in ("ws", "lcomment", "bcomment"):
            toks.append(_Tok(kind, s, line, col))
        nl = s.count("\n")
        if nl:
            line += nl
            col = len(s) - s.rfind("\n")
        else:
            col += len(s)
        pos = end
    return toks


class _Parser:
    def __init__(self, toks: list[_Tok], file: str):
        self.toks, self.i, self.file = toks, 0, file

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self, what: str) -> _Tok:
        t = self.peek()
        if t is None:
            last = self.toks[-1] if self.toks else _Tok("", "", 1, 1)
            raise ConfigError(f"expected {what} but the file ended", Loc(self.file, last.line, last.col))
        self.i += 1
        return t

    def loc(self, t: _Tok) -> Loc:
        return Loc(self.file, t.line, t.col)

    def at_section(self) -> bool:
        t = self.peek()
        return t is None or (t.kind == "ident" and t.text in _SECTIONS)

    def value(self) -> Any:
        t = self.next("a value")
        if t.kind == "num":
            return int(t.text)
        if t.kind == "str":
            return bytes(t.text[1:-1], "utf-8").decode("unicode_escape")
        if t.kind == "ident":
            if t.text in _SECTIONS:
                # (`M =` with its value missing: TLC's grammar reserves the section keywords)
                raise ConfigError(f"expected a value, got the section keyword {t.text}", self.loc(t))
            if t.text == "TRUE":
                return True
            if t.text == "FALSE":
                return False
            return ModelValue(t.text)
        if t.text == "{":
            items = []
            if self.peek() and self.peek().text == "}":
                self.i += 1
                return frozenset()
            while True:
                items.append(self.value())
                sep = self.next("',' or '}'")
                if sep.text == "}":
                    try:
                        return set_of(items)    # ({1, TRUE}: TLC refuses a boolean beside 1)
                    except EvalError as e:
                        raise ConfigError(e.message, self.loc(t)) from None
                if sep.text != ",":
                    raise ConfigError(f"expected ',' or '}}' in a set, got {sep.text!r}", self.loc(sep))
        raise ConfigError(f"expected a value, got {t.text!r}", self.loc(t))


def parse_cfg(text: str, file: str = "<cfg>") -> Config:
    cfg = Config(file=file)
    p = _Parser(_tokenize(text, file), file)
    while p.peek() is not None:
        t = p.next("a section keyword")
        if t.kind != "ident" or t.text not in _SECTIONS:
            raise ConfigError(f"expected a section keyword (CONSTANTS, INIT, ...), got {t.text!r}", p.loc(t))
        section = _SECTIONS[t.text]
        if section == "constants":
            while not p.at_section():
                name = p.next("a constant name")
                if name.kind != "ident":
                    raise ConfigError(f"expected a constant name, got {name.text!r}", p.loc(name))
                op = p.next("'=' or '<-'")
                if op.text in ("=", "<-"):
                    _assign_once(cfg, name.text, p.loc(name))
                if op.text == "=":
                    cfg.constants[name.text] = p.value()
                elif op.text == "<-":
                    nxt = p.next("a definition name")
                    if nxt.text == "[":  # Op <- [Mod] Def
                        p.next("a module name")
                        p.next("']'")
                        nxt = p.next("a definition name")
                    cfg.overrides[name.text] = nxt.text
                    cfg.locs.setdefault(nxt.text, p.loc(nxt))
                else:
                    raise ConfigError(f"expected '=' or '<-' after {name.text}, got {op.text!r}", p.loc(op))
        elif section in ("invariants", "properties", "constraints", "action_constraints"):
            got = 0
            while not p.at_section():
                n = p.next("a name")
                if n.kind != "ident":
                    raise ConfigError(f"expected a definition name, got {n.text!r}", p.loc(n))
                getattr(cfg, section).append(n.text)
                cfg.locs.setdefault(n.text, p.loc(n))
                got += 1
            if not got:
                raise ConfigError(f"{t.text} names nothing", p.loc(t))
        elif section == "check_deadlock":
            v = p.next("TRUE or FALSE")
            if v.text not in ("TRUE", "FALSE"):
                raise ConfigError(f"CHECK_DEADLOCK takes TRUE or FALSE, got {v.text!r}", p.loc(v))
            cfg.check_deadlock = v.text == "TRUE"
        else:
            n = p.next("a name")
            if n.kind != "ident":
                raise ConfigError(f"{t.text} expects a definition name, got {n.text!r}", p.loc(n))
            setattr(cfg, section, n.text)
            cfg.locs.setdefault(n.text, p.loc(n))
    if cfg.specification and (cfg.init or cfg.next):
        raise ConfigError("give either SPECIFICATION or INIT/NEXT, not both", Loc(file, 1, 1))
    return cfg


def _assign_once(cfg: Config, name: str, loc: Loc) -> None:
    """Record where `name` is assigned; a second assignment is an error. (TLC applies the
    assignments in order, so the last one silently wins: a typo'd copy of a line, or two
    edits that each set the constant, would change the model without a word.)"""
    first = cfg.constant_locs.get(name)
    if first is not None:
        raise ConfigError(f"constant {name} is assigned twice (first at {first})", loc)
    cfg.constant_locs[name] = loc


def load_cfg(path: str | Path) -> Config:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"no such configuration file {path}", Loc(str(path), 0, 0))
    return parse_cfg(path.read_text(), str(path))
