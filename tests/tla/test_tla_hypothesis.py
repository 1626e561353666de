"""Property tests: random integer/boolean/set/sequence expressions, each generated together
with its Python value, printed as TLA+, evaluated by the compiler and compared.

Every compound is parenthesized when printed, so precedence never decides the meaning;
partial operators are generated only on their domain (divisor > 0 for %, nonzero for \\div,
nonempty sequences for Head/Tail). Each example batches a list of expressions into one
module, since parsing dominates the cost.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from tla_testlib import eval_many

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def lit_int(v: int) -> str:
    return str(v) if v >= 0 else f"(-{-v})"


@st.composite
def int_expr(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        v = draw(st.integers(-20, 20))
        return lit_int(v), v
    kind = draw(st.sampled_from(["+", "-", "*", "div", "mod", "pow", "card", "len", "head", "if", "choose", "neg"]))
    if kind in ("+", "-", "*"):
        (a, av), (b, bv) = draw(int_expr(depth - 1)), draw(int_expr(depth - 1))
        return f"({a} {kind} {b})", {"+": av + bv, "-": av - bv, "*": av * bv}[kind]
    if kind == "div":
        (a, av), (b, bv) = draw(int_expr(depth - 1)), draw(int_expr(depth - 1))
        if bv == 0:
            return f"({a} \\div ({b} + 1))", av // (bv + 1)
        return f"({a} \\div {b})", av // bv           # TLA+'s \div is floor division
    if kind == "mod":
        (a, av) = draw(int_expr(depth - 1))
        m = draw(st.integers(1, 9))
        return f"({a} % {m})", av % m                  # result in 0..m-1, as Python's %
    if kind == "pow":
        (a, av) = draw(int_expr(depth - 1))
        e = draw(st.integers(0, 4))
        return f"({a} ^ {e})", av ** e
    if kind == "neg":
        (a, av) = draw(int_expr(depth - 1))
        return f"(-{a})", -av
    if kind == "card":
        s, sv = draw(set_expr(depth - 1))
        return f"Cardinality({s})", len(sv)
    if kind == "len":
        s, sv = draw(seq_expr(depth - 1))
        return f"Len({s})", len(sv)
    if kind == "head":
        s, sv = draw(seq_expr(depth - 1))
        return f"Head(Append({s}, 7))", (sv + (7,))[0]
    if kind == "choose":
        (s, sv), k = draw(set_expr(depth - 1)), draw(st.integers(-5, 5))
        u = f"({s} \\cup {{{lit_int(k)}}})"
        # (u is repeated inside the CHOOSE's body: its own binders must not reuse the
        # names bound there, which TLA+ refuses; names of this depth are fresh below it)
        m, n = f"m{depth}", f"n{depth}"
        return f"(CHOOSE {m} \\in {u} : \\A {n} \\in {u} : {m} >= {n})", max(sv | {k})   # the unique maximum
    c, cv = draw(bool_expr(depth - 1))
    (a, av), (b, bv) = draw(int_expr(depth - 1)), draw(int_expr(depth - 1))
    return f"(IF {c} THEN {a} ELSE {b})", av if cv else bv


@st.composite
def bool_expr(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        v = draw(st.booleans())
        return ("TRUE" if v else "FALSE"), v
    kind = draw(st.sampled_from(["<", "<=", "=", "#", "in", "subseteq", "and", "or", "not", "implies",
                                 "forall", "exists", "seqeq"]))
    if kind in ("<", "<=", "=", "#"):
        (a, av), (b, bv) = draw(int_expr(depth - 1)), draw(int_expr(depth - 1))
        return f"({a} {kind} {b})", {"<": av < bv, "<=": av <= bv, "=": av == bv, "#": av != bv}[kind]
    if kind == "in":
        (a, av), (s, sv) = draw(int_expr(depth - 1)), draw(set_expr(depth - 1))
        return f"({a} \\in {s})", av in sv
    if kind == "subseteq":
        (s, sv), (t, tv) = draw(set_expr(depth - 1)), draw(set_expr(depth - 1))
        return f"({s} \\subseteq {t})", sv <= tv
    if kind in ("and", "or", "implies"):
        (a, av), (b, bv) = draw(bool_expr(depth - 1)), draw(bool_expr(depth - 1))
        op = {"and": "/\\", "or": "\\/", "implies": "=>"}[kind]
        return f"({a} {op} {b})", {"and": av and bv, "or": av or bv, "implies": (not av) or bv}[kind]
    if kind == "not":
        a, av = draw(bool_expr(depth - 1))
        return f"(~{a})", not av
    if kind in ("forall", "exists"):
        (s, sv), k = draw(set_expr(depth - 1)), draw(st.integers(-5, 5))
        q = "\\A" if kind == "forall" else "\\E"
        f = all if kind == "forall" else any
        return f"({q} x \\in {s} : x > {lit_int(k)})", f(x > k for x in sv)
    (s, sv), (t, tv) = draw(seq_expr(depth - 1)), draw(seq_expr(depth - 1))
    return f"({s} = {t})", sv == tv


@st.composite
def set_expr(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        vals = draw(st.lists(st.integers(-10, 10), max_size=5))
        if draw(st.booleans()) or not vals:
            return "{" + ", ".join(lit_int(v) for v in vals) + "}", frozenset(vals)
        lo, hi = draw(st.integers(-5, 5)), draw(st.integers(-5, 8))
        return f"({lit_int(lo)}..{lit_int(hi)})", frozenset(range(lo, hi + 1))
    kind = draw(st.sampled_from(["cup", "cap", "minus", "filter", "map", "union", "dom", "range"]))
    if kind in ("cup", "cap", "minus"):
        (s, sv), (t, tv) = draw(set_expr(depth - 1)), draw(set_expr(depth - 1))
        op = {"cup": "\\cup", "cap": "\\cap", "minus": "\\"}[kind]
        return f"({s} {op} {t})", {"cup": sv | tv, "cap": sv & tv, "minus": sv - tv}[kind]
    if kind == "filter":
        (s, sv), k = draw(set_expr(depth - 1)), draw(st.integers(-5, 5))
        return f"{{x \\in {s} : x % 2 = {abs(k) % 2}}}", frozenset(x for x in sv if x % 2 == abs(k) % 2)
    if kind == "map":
        (s, sv), k = draw(set_expr(depth - 1)), draw(st.integers(-3, 3))
        return f"{{(x * {lit_int(k)}) % 7 : x \\in {s}}}", frozenset((x * k) % 7 for x in sv)
    if kind == "union":
        (s, sv), (t, tv) = draw(set_expr(depth - 1)), draw(set_expr(depth - 1))
        return f"(UNION {{{s}, {t}}})", sv | tv
    if kind == "dom":
        s, sv = draw(seq_expr(depth - 1))
        return f"(DOMAIN {s})", frozenset(range(1, len(sv) + 1))
    s, sv = draw(seq_expr(depth - 1))
    i = f"i{depth}"      # (s, inside this binder's scope, binds names of lower depths only)
    return f"{{{s}[{i}] : {i} \\in 1..Len({s})}}", frozenset(sv)


@st.composite
def seq_expr(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        vals = tuple(draw(st.lists(st.integers(-10, 10), max_size=4)))
        return "<<" + ", ".join(lit_int(v) for v in vals) + ">>", vals
    kind = draw(st.sampled_from(["append", "tail", "concat", "subseq", "select", "fn", "except"]))
    s, sv = draw(seq_expr(depth - 1))
    if kind == "append":
        a, av = draw(int_expr(depth - 1))
        return f"Append({s}, {a})", sv + (av,)
    if kind == "tail":
        return f"Tail(<<0>> \\o {s})", sv
    if kind == "concat":
        t, tv = draw(seq_expr(depth - 1))
        return f"({s} \\o {t})", sv + tv
    if kind == "subseq":
        m = draw(st.integers(1, len(sv) + 1))
        n = draw(st.integers(m - 1, len(sv)))
        return f"SubSeq({s}, {m}, {n})", sv[m - 1:n]
    if kind == "select":
        k = draw(st.integers(-5, 5))
        return f"SelectSeq({s}, LAMBDA x : x > {lit_int(k)})", tuple(x for x in sv if x > k)
    if kind == "fn":
        n = draw(st.integers(0, 4))
        k = draw(st.integers(-3, 3))
        return f"[i \\in 1..{n} |-> i * {lit_int(k)}]", tuple(i * k for i in range(1, n + 1))
    if not sv:
        return s, sv
    i = draw(st.integers(1, len(sv)))
    a, av = draw(int_expr(depth - 1))
    return f"[{s} EXCEPT ![{i}] = @ + {a}]", sv[:i - 1] + (sv[i - 1] + av,) + sv[i:]


@st.composite
def fcn_expr(draw, depth=2):
    """Functions and records, with their Python value as a dict (mk_fcn'd when compared)."""
    kind = draw(st.sampled_from(["record", "lambda", "colon", "except", "merge"] if depth else ["record"]))
    if kind == "record":
        a, av = draw(int_expr(1))
        b, bv = draw(seq_expr(1))
        return f"[a |-> {a}, b |-> {b}]", {"a": av, "b": bv}
    if kind == "lambda":
        (s, sv), k = draw(set_expr(1)), draw(st.integers(-3, 3))
        return f"[x \\in {s} |-> x * {lit_int(k)}]", {x: x * k for x in sv}
    if kind == "colon":
        k, v = draw(st.integers(-5, 5)), draw(st.integers(-5, 5))
        return f"({lit_int(k)} :> {lit_int(v)})", {k: v}
    f, fv = draw(fcn_expr(depth - 1))
    if kind == "merge":
        g, gv = draw(fcn_expr(depth - 1))
        return f"({f} @@ {g})", {**gv, **fv}     # f wins on the common domain
    if not fv:
        return f, fv
    key = draw(st.sampled_from(sorted(fv, key=repr)))
    e, ev = draw(int_expr(1))
    kt = f'"{key}"' if isinstance(key, str) else lit_int(key)
    return f"[{f} EXCEPT ![{kt}] = {e}]", {**fv, key: ev}


def _check(tmp_path_factory, pairs):
    d = tmp_path_factory.mktemp("hyp")
    got = eval_many(d, [e for e, _ in pairs])
    for (e, want), g in zip(pairs, got):
        if type(want) is bool:
            assert g is want, e
        elif type(want) is int:
            assert type(g) is int and g == want, e
        elif not isinstance(want, frozenset):
            assert g == want, (e, g, want)
        else:
            assert frozenset(g) == want, (e, g, want)


@SETTINGS
@given(st.lists(int_expr(), min_size=1, max_size=8))
def test_random_integer_expressions(tmp_path_factory, pairs):
    _check(tmp_path_factory, pairs)


@SETTINGS
@given(st.lists(bool_expr(), min_size=1, max_size=8))
def test_random_boolean_expressions(tmp_path_factory, pairs):
    _check(tmp_path_factory, pairs)


@SETTINGS
@given(st.lists(set_expr(), min_size=1, max_size=8))
def test_random_set_expressions(tmp_path_factory, pairs):
    _check(tmp_path_factory, pairs)


@SETTINGS
@given(st.lists(seq_expr(), min_size=1, max_size=8))
def test_random_sequence_expressions(tmp_path_factory, pairs):
    _check(tmp_path_factory, pairs)


@SETTINGS
@given(st.lists(fcn_expr(), min_size=1, max_size=6))
def test_random_function_expressions(tmp_path_factory, pairs):
    from hicache.tla.values import mk_fcn
    exprs = []
    for f, fv in pairs:
        exprs.append((f, mk_fcn(fv)))
        exprs.append((f"DOMAIN {f}", frozenset(fv)))
        for k in sorted(fv, key=repr)[:2]:
            kt = f'"{k}"' if isinstance(k, str) else lit_int(k)
            want = fv[k]
            exprs.append((f"{f}[{kt}]", want if not isinstance(want, dict) else mk_fcn(want)))
    _check(tmp_path_factory, exprs)
