"""Infix precedence as SANY has it: chains it groups neither way are located syntax errors,
and wherever SANY groups, the parser groups the same way."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import tla

from hicache.tla import precedence
from hicache.tla.compiler import Model
from hicache.tla.errors import EvalError, ParseError
from hicache.tla.loader import Loader


def _load(tmp_path: Path, expr: str):
    """Load a module P whose line 3 is `X == <expr>`; returns (loader, module)."""
    (tmp_path / "P.tla").write_text(f"---- MODULE P ----\nEXTENDS Integers, TLC\nX == {expr}\n====\n")
    loader = Loader([tmp_path])
    return loader, loader.load_file(tmp_path / "P.tla")


def _value(tmp_path: Path, expr: str):
    """X's value in the module `_load` writes: what the parser's grouping evaluates to."""
    loader, root = _load(tmp_path, expr)
    return Model(loader, root, {}, {}).def_value("X")((), None, ())


@pytest.mark.parametrize("expr, first, second, col", [
    ("TRUE => FALSE => TRUE", "=>", "=>", 20),             # `=>` is not associative: (a=>b)=>c or a=>(b=>c)?
    ("TRUE <=> FALSE <=> TRUE", "<=>", "<=>", 21),
    ("1 = 1 = TRUE", "=", "=", 12),
    ("1 # 2 /= TRUE", "#", "/=", 12),                       # one operator spelled two ways: still no chain
    ("1 < 2 = TRUE", "<", "=", 12),
    ("1 \\in {1} \\in {TRUE}", "\\in", "\\in", 16),
    ("TRUE /\\ FALSE \\/ TRUE", "/\\", "\\/", 20),          # inline: a bulleted list is the way to mix them
    ("6 * 2 \\div 3", "*", "\\div", 12),
    ("{1} \\cup {2} \\cap {3}", "\\cup", "\\cap", 19),
    ("{1} \\setminus {2} \\cup {3}", "\\setminus", "\\cup", 24),   # a spelling the table missed
    ("TRUE => (* why *) FALSE \\* not here\n     => TRUE", "=>", "=>", 6),   # past comments, on line 4
])
def test_a_chain_sany_groups_neither_way_is_a_located_syntax_error(tmp_path, expr, first, second, col):
    # the parser used to group it left: `a => b => c` read as (a => b) => c, SANY refuses it
    with pytest.raises(ParseError) as ei:
        _load(tmp_path, expr)
    line = 3 + expr.count("\n")
    assert str(ei.value) == (f"{tmp_path / 'P.tla'}:{line}:{col}: parse error: precedence conflict between "
                             f"`{first}` and `{second}`: TLA+ groups them neither way, add parentheses")


@pytest.mark.parametrize("expr, value", [
    ("(TRUE => FALSE) => TRUE", True), ("TRUE => (FALSE => TRUE)", True),
    ("TRUE /\\ FALSE /\\ TRUE", False), ("TRUE \\/ FALSE \\/ TRUE", True),      # left-associative
    ("{1} \\cup {2} \\union {3}", frozenset({1, 2, 3})),            # one operator, two spellings
    ("1 + 2 - 3", 0), ("1 - 2 + 3", 2), ("1 - 2 - 3", -4),           # `-` binds tighter than `+`
    ("1 = 2 /\\ 3 # 4 => 5 \\in {5} <=> TRUE", True),                # nested ranges: no conflict
    ("FALSE => FALSE <=> FALSE", True),                               # `<=>` (2) binds tighter than `=>` (1)
    ("(1 :> 2 @@ 3 :> 4)[1] = 2", True),
    ("\\A x \\in {1} : x = 1 => \\E y \\in {2} : y = 2 => TRUE", True),   # quantifier bodies are not chains
    ("/\\ TRUE => FALSE\n     /\\ 1 = 1", False),                     # bulleted items are separate
])
def test_what_sany_groups_loads_and_evaluates_as_grouped(tmp_path, expr, value):
    # (the value is the grouping's: `1 - 2 + 3` read as 1 - (2 + 3) would be -4, and
    # `FALSE => FALSE <=> FALSE` read as (FALSE => FALSE) <=> FALSE would be FALSE)
    got = _value(tmp_path, expr)
    assert got == value and type(got) is type(value)


def test_operators_of_overlapping_ranges_are_a_conflict_too(tmp_path):
    """SANY rejects `a + b % c` (`+` 10-10, `%` 10-11: overlapping ranges); spec/CPSharding.tla
    wrote it until this check was complete."""
    assert precedence.grouping("+", "%") is None
    with pytest.raises(ParseError, match="precedence conflict between `\\+` and `%`"):
        _load(tmp_path, "1 + 5 % 3")
    assert _value(tmp_path, "1 + (5 % 3)") == 3


def _representatives() -> list[str]:
    """One infix operator per (low, high, associativity) class of SANY's table."""
    seen: dict[tuple, str] = {}
    for op, cls in precedence._INFIX.items():
        seen.setdefault(cls, op)
    return list(seen.values())


def test_the_parser_groups_as_sany_wherever_sany_groups():
    # what makes a parent/child check enough: the parser's total order agrees with
    # SANY's partial one on every pair SANY accepts
    ops = _representatives() + ["/\\", "\\/", "#", "<=>", "\\cup"]
    wrong = []
    for a in ops:
        for b in ops:
            want = precedence.grouping(a, b)
            if want is None:
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                x = tla.parse(f"---- MODULE A ----\nX == x {a} y {b} z\n====\n").units[0].definiens
            got = "left" if type(x.arguments[0]).__name__ == "OperatorApplication" and x.arguments[0].arguments \
                else "right"
            if got != want:
                wrong.append((a, b, got, want))
    assert not wrong


@pytest.mark.parametrize("expr, first, second, col", [
    ("SUBSET {1} \\cup {{7}}", "SUBSET", "\\cup", 17),     # both 8-8: read as SUBSET ({1} \cup {{7}}) before
    ("UNION {{1}} \\cup {2}", "UNION", "\\cup", 18),
    ("DOMAIN <<1>> .. 3", "DOMAIN", "..", 19),              # both 9-9
])
def test_a_prefix_operator_sany_groups_neither_way_is_a_located_syntax_error(tmp_path, expr, first, second, col):
    with pytest.raises(ParseError) as ei:
        _load(tmp_path, expr)
    assert str(ei.value) == (f"{tmp_path / 'P.tla'}:3:{col}: parse error: precedence conflict between "
                             f"`{first}` and `{second}`: TLA+ groups them neither way, add parentheses")


@pytest.mark.parametrize("expr, value", [
    ("~ 1 = 2", True), ("\\lnot TRUE /\\ FALSE", False), ("-2 ^ 2 = -4", True), ("-2 + 3 = 1", True),
    ("DOMAIN <<1>> \\cup {5}", frozenset({1, 5})),
    ("(SUBSET {1}) \\cup {{7}}", frozenset({frozenset(), frozenset({1}), frozenset({7})})),
    ("SUBSET ({1} \\cup {7})", frozenset({frozenset(), frozenset({1}), frozenset({7}), frozenset({1, 7})})),
])
def test_prefix_operators_sany_groups_load_and_evaluate_as_grouped(tmp_path, expr, value):
    assert _value(tmp_path, expr) == value


def test_a_prefix_operator_below_an_infix_one_takes_the_whole_chain(tmp_path):
    # DOMAIN (9-9) lies below `+` (10-10): DOMAIN (<<1>> + 1), which SANY accepts and which
    # fails only when evaluated, at the `+`
    with pytest.raises(EvalError, match=r"P\.tla:3:13: evaluation error: \+ applied to <<1>> and 1"):
        _value(tmp_path, "DOMAIN <<1>> + 1")


def test_the_parser_groups_prefix_operators_as_sany_wherever_sany_groups():
    # `P x b y`: (P x) b y when P's range lies above b's, P (x b y) below; the parent/child
    # check relies on the parser agreeing on every such pair
    ops = _representatives() + ["/\\", "\\/", "#", "<=>", "\\cup"]
    wrong, checked = [], 0
    for p in [*precedence._PREFIX, "\\lnot", "\\neg"]:
        for b in ops:
            want = precedence.prefix_grouping(p, b)
            if want is None:
                continue
            checked += 1
            with contextlib.redirect_stdout(io.StringIO()):
                x = tla.parse(f"---- MODULE A ----\nX == {p} x {b} y\n====\n").units[0].definiens
            got = "infix" if x.operator == p and len(x.arguments) == 1 else "prefix"   # (`-x - y`: two minuses)
            if got != want:
                wrong.append((p, b, got, want))
    assert checked == 182 and not wrong, wrong
