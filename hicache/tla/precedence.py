r"""SANY's precedence rules for infix operators, checked on a parsed module.

The PyPI `tla` parser orders the operators totally and groups every chain (it leaves it
to "later analysis stages to decide whether parentheses are required"). SANY orders them
partially: each infix operator has a precedence range and an associativity, and for two
adjacent operators `x A y B z` it groups left when A's range lies above B's (or A = B,
left-associative), right when below, and otherwise rejects the expression ("Precedence
conflict between ops"). So `a => b => c`, `a = b = c`, `a /\\ b \\/ c` and `a * b \\div c` are
errors in TLA+, whichever way one reads them.

Wherever SANY accepts a pair, the `tla` parser groups it the same way (tested for every
pair of the table's precedence classes), so comparing each unparenthesized infix node with
its infix children finds SANY's conflicts.

Rejected: every conflict SANY reports between infix operators, those of one range (`=>`
chains, `=`, `#`, `<`, `\in` mixed or chained, `/\` and `\/` inline, `*` and `\div`) and
those whose ranges merely overlap (`a + b % c`: `+` is 10-10, `%` 10-11; spec/CPSharding.tla
wrote that until this check found it, so TLC would not have parsed it), and between a
prefix operator and an infix one in its operand (`SUBSET S \cup T`: both 8-8).
"""
from __future__ import annotations

from hicache.tla.errors import Loc, ParseError
from hicache.tla.stdlib import SYNONYMS

_LEFT, _NONE = "left", "none"

#: infix operator -> (low, high, associativity): tla2sany ConfigConstants.CanonicalOperators
#: (precedences divided by 10, as in Specifying Systems' table)
_INFIX: dict[str, tuple[int, int, str]] = {
    "^": (14, 14, _NONE), "^^": (14, 14, _NONE), "\\wr": (9, 14, _NONE), "\\cdot": (5, 14, _LEFT),
    "/": (13, 13, _NONE), "//": (13, 13, _NONE), "\\div": (13, 13, _NONE), "\\oslash": (13, 13, _NONE),
    "*": (13, 13, _LEFT), "**": (13, 13, _LEFT), "&": (13, 13, _LEFT), "&&": (13, 13, _LEFT),
    "\\odot": (13, 13, _LEFT), "\\otimes": (13, 13, _LEFT), "\\star": (13, 13, _LEFT), "\\o": (13, 13, _LEFT),
    "\\bigcirc": (13, 13, _LEFT), "\\bullet": (13, 13, _LEFT),
    "$": (9, 13, _LEFT), "$$": (9, 13, _LEFT), "??": (9, 13, _LEFT), "##": (9, 13, _LEFT),
    "\\uplus": (9, 13, _LEFT), "\\sqcap": (9, 13, _LEFT), "\\sqcup": (9, 13, _LEFT), "!!": (9, 13, _NONE),
    "-": (11, 11, _LEFT), "--": (11, 11, _LEFT), "\\ominus": (11, 11, _LEFT),
    "|": (10, 11, _LEFT), "||": (10, 11, _LEFT), "%%": (10, 11, _LEFT), "%": (10, 11, _NONE),
    "+": (10, 10, _LEFT), "++": (10, 10, _LEFT), "\\oplus": (10, 10, _LEFT),
    "..": (9, 9, _NONE), "...": (9, 9, _NONE),
    "\\": (8, 8, _NONE), "\\intersect": (8, 8, _LEFT), "\\union": (8, 8, _LEFT),
    "<:": (7, 7, _NONE), ":>": (7, 7, _NONE), "@@": (6, 6, _LEFT),
    **{op: (5, 5, _NONE) for op in (
        "=", "/=", "<", ">", "\\leq", "\\geq", "\\in", "\\notin", "\\subseteq", "\\subset", "\\supset",
        "\\supseteq", "|-", "|=", "-|", "=|", ":=", "::=", "\\prec", "\\succ", "\\preceq", "\\succeq",
        "\\sim", "\\simeq", "\\ll", "\\gg", "\\asymp", "\\approx", "\\cong", "\\sqsubset", "\\sqsubseteq",
        "\\sqsupset", "\\sqsupseteq", "\\doteq", "\\propto")},
    "\\land": (3, 3, _LEFT), "\\lor": (3, 3, _LEFT),
    "~>": (2, 2, _NONE), "\\equiv": (2, 2, _NONE), "-+->": (2, 2, _NONE),
    "=>": (1, 1, _NONE),
}

#: spellings of one operator (tla2sany ConfigConstants.OperatorSynonyms): `a \cup b \union c`
#: chains one left-associative operator, `a # b /= c` one non-associative one. A spelling is
#: first brought to the builtin's name (`stdlib.SYNONYMS`, the evaluator's one table of
#: synonyms), then to this table's key
_TABLE_KEY = {
    "/\\": "\\land", "\\/": "\\lor", "<=>": "\\equiv", "#": "/=", "<=": "\\leq", ">=": "\\geq",
    "\\cap": "\\intersect", "\\cup": "\\union", "(+)": "\\oplus", "(-)": "\\ominus",
    "(.)": "\\odot", "(/)": "\\oslash", "(\\X)": "\\otimes",
}


#: prefix operator -> (low, high): Specifying Systems' table (tla2sany's prefix entries).
#: `P x B y` groups `(P x) B y` when P's range lies above B's, `P (x B y)` when below, and
#: is a conflict when they overlap (`SUBSET S \cup T`: both 8-8)
_PREFIX: dict[str, tuple[int, int]] = {
    "~": (4, 4), "ENABLED": (4, 15), "UNCHANGED": (4, 15), "[]": (4, 15), "<>": (4, 15),
    "SUBSET": (8, 8), "UNION": (8, 8), "DOMAIN": (9, 9), "-": (12, 12),
}
_PREFIX_KEY = {"\\lnot": "~", "\\neg": "~", "-.": "-"}


def _canon(op: str) -> str:
    op = SYNONYMS.get(op, op)
    return _TABLE_KEY.get(op, op)


def grouping(a: str, b: str) -> str | None:
    """How SANY groups `x a y b z`: "left", "right", or None (a precedence conflict)."""
    a, b = _canon(a), _canon(b)
    lo_a, hi_a, assoc_a = _INFIX[a]
    lo_b, hi_b, _ = _INFIX[b]
    if lo_a > hi_b or (a == b and assoc_a == _LEFT):
        return "left"
    if hi_a < lo_b:
        return "right"
    return None


def prefix_grouping(p: str, b: str) -> str | None:
    """How SANY groups `P x b y` for prefix operator P: "prefix" (`(P x) b y`), "infix"
    (`P (x b y)`), or None (a precedence conflict)."""
    lo_p, hi_p = _PREFIX[_PREFIX_KEY.get(p, p)]
    lo_b, hi_b, _ = _INFIX[_canon(b)]
    if lo_p > hi_b:
        return "prefix"
    if hi_p < lo_b:
        return "infix"
    return None


def _prefix_op(node) -> str | None:
    """The operator of a prefix application (`~ x`, `SUBSET S`, `-x`; not parenthesized)."""
    if type(node).__name__ != "OperatorApplication" or node.nonfix:
        return None
    op = node.operator
    if isinstance(op, str) and _PREFIX_KEY.get(op, op) in _PREFIX and node.arguments and len(node.arguments) == 1:
        return op
    return None


def _infix_op(node) -> str | None:
    """The operator of a binary infix application (not `Op(a, b)`, not parenthesized)."""
    if type(node).__name__ != "OperatorApplication" or node.nonfix:
        return None
    op = node.operator
    if isinstance(op, str) and _canon(op) in _INFIX and node.arguments and len(node.arguments) == 2:
        return op
    return None


def check_precedence(tree, text: str, file: str) -> None:
    """ParseError at the second operator of the first pair SANY would reject."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
            continue
        fields = getattr(node, "_fields", None)
        if fields is None:
            continue
        op = _infix_op(node)
        if op is not None:
            left, right = node.arguments
            lop, rop = _infix_op(left), _infix_op(right)
            if lop is not None and _rejected(lop, op):
                _conflict(lop, op, left, text, file)
            if rop is not None and _rejected(op, rop):
                _conflict(op, rop, right.arguments[0], text, file)
            pop = _prefix_op(left)          # parsed `(P x) op y`
            if pop is not None and prefix_grouping(pop, op) != "prefix":
                _conflict(pop, op, left, text, file)
        pop = _prefix_op(node)
        if pop is not None:                 # parsed `P (x b y)`
            bop = _infix_op(node.arguments[0])
            if bop is not None and prefix_grouping(pop, bop) != "infix":
                _conflict(pop, bop, node.arguments[0].arguments[0], text, file)
        stack.extend(reversed([getattr(node, f) for f in fields]))


def _rejected(a: str, b: str) -> bool:
    """A conflict of `x a y b z`: SANY's (same or overlapping ranges, not one chain)."""
    return grouping(a, b) is None


def _conflict(first: str, second: str, before, text: str, file: str) -> None:
    raise ParseError(f"precedence conflict between `{first}` and `{second}`: TLA+ groups them neither way, "
                     f"add parentheses", _after(before, text, file))


def _after(node, text: str, file: str) -> Loc:
    """The first token after `node` (the operator that follows it), past blanks and comments."""
    end = getattr(node, "end", None)
    if end is None:
        return Loc(file, 0, 0)
    lines = text.split("\n")
    line, col = end.line, end.column
    depth = 0          # (* nested comments *)
    while line < len(lines):
        s = lines[line]
        while col < len(s):
            if depth:
                if s.startswith("*)", col):
                    depth, col = depth - 1, col + 2
                elif s.startswith("(*", col):
                    depth, col = depth + 1, col + 2
                else:
                    col += 1
            elif s.startswith("(*", col):
                depth, col = 1, col + 2
            elif s.startswith("\\*", col):
                col = len(s)
            elif s[col].isspace():
                col += 1
            else:
                return Loc(file, line + 1, col + 1)
        line, col = line + 1, 0
    return Loc(file, end.line + 1, end.column + 1)
