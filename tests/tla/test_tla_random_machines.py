"""Differential test of the checker's counting: random small state machines over two
bounded counters, written as TLA+ and as Python, explored by the checker and by the
reference BFS (tla_bfs.py); distinct/generated/depth must agree exactly.

Each action is `guard /\\ update`; updates may be nondeterministic (`x' \\in {..}`,
`\\E d \\in {..} : ...`), which yields one successor per witness, duplicates included,
as TLC counts them. An optional CONSTRAINT cuts the space.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from tla_bfs import bfs
from tla_testlib import check_text

CMP = {"<": lambda a, b: a < b, "=": lambda a, b: a == b, "#": lambda a, b: a != b, ">=": lambda a, b: a >= b}


@st.composite
def machine(draw):
    m = draw(st.integers(2, 4))
    init_x = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=m, unique=True))
    init_y = draw(st.integers(0, m - 1))
    actions = []
    for _ in range(draw(st.integers(1, 4))):
        var = draw(st.sampled_from("xy"))
        op = draw(st.sampled_from(sorted(CMP)))
        k = draw(st.integers(0, m - 1))
        kind = draw(st.sampled_from(["det", "in", "exists", "unchanged_y"]))
        a, b = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        ds = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
        actions.append((var, op, k, kind, a, b, ds))
    bound = draw(st.one_of(st.none(), st.integers(1, 2 * m - 2)))
    return m, init_x, init_y, actions, bound


def to_tla(mach) -> tuple[str, str]:
    m, init_x, init_y, actions, bound = mach
    lines = ["---- MODULE Rand ----", "EXTENDS Naturals", "VARIABLES x, y",
             f"Init == x \\in {{{', '.join(map(str, init_x))}}} /\\ y = {init_y}"]
    names = []
    for i, (var, op, k, kind, a, b, ds) in enumerate(actions):
        guard = f"{var} {op} {k}"
        dset = "{" + ", ".join(map(str, ds)) + "}"
        upd = {
            "det": f"x' = (x + {a}) % {m} /\\ y' = (y * {b} + 1) % {m}",
            "in": f"x' \\in {{(x + {a}) % {m}, (x + {b}) % {m}}} /\\ y' = y",
            "exists": f"\\E d \\in {dset} : y' = (y + d) % {m} /\\ x' = x",
            "unchanged_y": f"x' = (x * {a} + {b}) % {m} /\\ UNCHANGED y",
        }[kind]
        lines.append(f"A{i} == {guard} /\\ {upd}")
        names.append(f"A{i}")
    lines.append("Next == " + " \\/ ".join(names))
    lines.append(f"Bound == x + y <= {bound if bound is not None else 2 * m}")
    lines.append("====")
    cfg = "INIT Init\nNEXT Next\nCHECK_DEADLOCK FALSE\n" + ("CONSTRAINT Bound\n" if bound is not None else "")
    return "\n".join(lines) + "\n", cfg


def reference(mach):
    m, init_x, init_y, actions, bound = mach

    def nxt(s):
        x, y = s
        out = []
        for var, op, k, kind, a, b, ds in actions:
            if not CMP[op](x if var == "x" else y, k):
                continue
            if kind == "det":
                out.append(((x + a) % m, (y * b + 1) % m))
            elif kind == "in":   # a set: equal elements collapse
                out += [(v, y) for v in {(x + a) % m, (x + b) % m}]
            elif kind == "exists":   # one successor per witness d, even if two coincide
                out += [(x, (y + d) % m) for d in ds]
            else:
                out.append(((x * a + b) % m, y))
        return out

    cons = (lambda s: s[0] + s[1] <= bound) if bound is not None else (lambda s: True)
    return bfs([(x, init_y) for x in init_x], nxt, constraint=cons)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(machine())
def test_random_machines_count_like_the_reference(tmp_path_factory, mach):
    spec, cfg = to_tla(mach)
    res = check_text(tmp_path_factory.mktemp("rand"), "Rand", spec, cfg)
    ref = reference(mach)
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth), spec + cfg
