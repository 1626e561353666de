"""hicache explain: first violating step, failing conjunct, behavior check, spec search, verdict."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from hicache.explain import Options, StepStatus, Verdict, explain
from hicache.explain.report import to_json, to_text
from hicache.tla.itf import decode, encode, read_itf, trace_to_itf, write_itf

ROOT = Path(__file__).resolve().parents[2]

TINY = """---- MODULE Tiny ----
EXTENDS Naturals
VARIABLES x, y
Init == x = 0 /\\ y = 0
Next == \\/ x' = x + 1 /\\ y' = y
        \\/ y' = y + 1 /\\ x' = x
Inv == /\\ x < 5
       /\\ \\A i \\in 1..3 : y # i \\/ x = 0
Safe == x < 100
====
"""
TINY_CFG = "INIT Init\nNEXT Next\nINVARIANT Inv\n"


@pytest.fixture
def tiny(tmp_path):
    spec = tmp_path / "Tiny.tla"
    spec.write_text(TINY)
    (tmp_path / "Tiny.cfg").write_text(TINY_CFG)
    return spec


def _write(tmp_path, spec, states, meta, name="t.itf.json"):
    """An ITF trace of (x, y) pairs, as `hicache check` writes them."""
    steps = [((x, y), None if i == 0 else "Next") for i, (x, y) in enumerate(states)]
    doc = trace_to_itf(["x", "y"], steps, dict(meta, source=str(spec)))
    p = tmp_path / name
    write_itf(p, doc)
    return p


# ---------------------------------------------------------------- a tiny spec, exact answers
def test_tiny_spec_design_bug(tmp_path, tiny):
    # x = 1, y = 1 violates the second conjunct with i = 1; the BFS counterexample has 3 states
    p = _write(tmp_path, tiny, [(0, 0), (1, 0), (1, 1)],
               {"config": str(tmp_path / "Tiny.cfg"), "result": "invariant", "violated": "Inv"})
    e = explain(p)
    j = to_json(e)
    assert j["violated"] == "Inv" and j["kind"] == "invariant"
    assert j["first_violating_step"] == 2
    assert j["conjunct"] == "\\A i \\in 1..3 : y # i \\/ x = 0"
    assert j["location"].endswith("Tiny.tla:8:11")
    assert j["bindings"] == {"i": "1"}
    assert j["trace_is_spec_behavior"] is True
    assert [c["status"] for c in j["step_checks"]] == ["initial", "spec_step", "spec_step"]
    assert j["spec_search"]["status"] == "found" and j["spec_shortest_length"] == 3
    assert j["verdict"] == "spec"
    assert j["diff"][-1] == {"step": 2, "action": "Next", "changes": {"y": ["0", "1"]}}


def test_tiny_spec_first_violation_not_last_state(tmp_path, tiny):
    # the invariant fails at step 2 and again at step 3: the first violating step is 2
    p = _write(tmp_path, tiny, [(0, 0), (1, 0), (1, 1), (1, 2)], {"violated": "Inv", "result": "invariant"})
    e = explain(p)
    assert e.first_violating_step == 2
    assert e.trace.steps[2].values == {"x": 1, "y": 1}


def test_tiny_implementation_step(tmp_path, tiny):
    # x jumps 1 -> 5 with y changing too: no spec action (nor 3 spec steps) does that
    p = _write(tmp_path, tiny, [(0, 0), (1, 0), (5, 1), (5, 2)], {"violated": "Inv", "result": "invariant"})
    e = explain(p)
    assert e.trace_is_spec_behavior is False
    assert e.divergence["step"] == 2
    assert e.verdict is Verdict.IMPLEMENTATION
    assert "the implementation took a step the spec does not allow at step 2 (action Next)" in to_text(e)
    assert [c.status for c in e.step_checks] == [StepStatus.INITIAL, StepStatus.SPEC_STEP,
                                                StepStatus.NOT_ALLOWED, StepStatus.SPEC_STEP]


def test_tiny_compound_step(tmp_path, tiny):
    # 0,0 -> 1,1 is two spec steps: a coarse event, allowed when compound >= 2 only
    p = _write(tmp_path, tiny, [(0, 0), (1, 1)], {"violated": "Inv", "result": "invariant"})
    e = explain(p)
    assert e.step_checks[1].status is StepStatus.COMPOUND and len(e.step_checks[1].actions) == 2
    assert e.trace_is_spec_behavior is True
    e1 = explain(p, Options(compound=1))
    assert e1.step_checks[1].status is StepStatus.NOT_ALLOWED and e1.trace_is_spec_behavior is False


def test_tiny_first_state_not_initial(tmp_path, tiny):
    p = _write(tmp_path, tiny, [(1, 0), (1, 1)], {"violated": "Inv", "result": "invariant"})
    e = explain(p)
    assert e.step_checks[0].status is StepStatus.NOT_INITIAL
    assert e.divergence["step"] == 0 and e.verdict is Verdict.IMPLEMENTATION


def test_spec_never_violates_is_implementation(tmp_path, tiny):
    # the trace records x only (a partial refinement map), so it cannot be checked step by
    # step; the search of the whole (constrained) state space finds no violation of Safe
    (tmp_path / "Bounded.cfg").write_text("INIT Init\nNEXT Next\nINVARIANT Safe\nCONSTRAINT Small\n")
    spec = tmp_path / "Tiny.tla"
    spec.write_text(TINY.replace("====", "Small == x < 4 /\\ y < 4\n===="))
    doc = {"#meta": {"source": str(spec), "config": str(tmp_path / "Bounded.cfg"), "result": "invariant",
                     "violated": "Safe"},
           "vars": ["x", "y"], "states": [{"x": encode(0)}, {"x": encode(100)}]}
    p = tmp_path / "partial.itf.json"
    p.write_text(json.dumps(doc))
    e = explain(p)
    assert e.trace_is_spec_behavior is None
    assert e.spec_search.status == "none" and e.spec_search.distinct == 16   # x, y in 0..3
    assert e.first_violating_step == 1
    assert e.verdict is Verdict.IMPLEMENTATION
    assert e.verdict_text.startswith("the spec never violates Safe under the model (16 states, the whole state")


def test_missing_meta_uses_flags(tmp_path, tiny):
    # a bare ITF trace (no #meta at all): --spec/--config supply what it lacks; the violated
    # invariant is the first of the config's that some state violates
    doc = {"vars": ["x", "y"], "states": [{"x": encode(0), "y": encode(0)}, {"x": encode(0), "y": encode(1)},
                                          {"x": encode(1), "y": encode(1)}]}
    p = tmp_path / "bare.itf.json"
    p.write_text(json.dumps(doc))
    e = explain(p, Options(spec=str(tiny), config=str(tmp_path / "Tiny.cfg")))
    assert e.trace.writer == "itf"
    assert e.violated == "Inv" and e.first_violating_step == 2
    assert e.trace_is_spec_behavior is True and e.verdict is Verdict.SPEC


def test_spec_not_found_reports_what_the_trace_has(tmp_path):
    violation = {"kind": "invariant", "property": "P", "conjunct": "a = b", "location": "spec/NoSuch.tla:3:5"}
    doc = {"#meta": {"source": "spec/NoSuch.tla", "violation": violation},
           "vars": ["a"], "states": [{"#meta": {"index": 0, "action": "A"}, "a": encode(1)},
                                     {"#meta": {"index": 1, "action": "B", "args": {"rank": 1}}, "a": encode(2)}]}
    p = tmp_path / "x.itf.json"
    p.write_text(json.dumps(doc))
    e = explain(p)
    j = to_json(e)
    assert j["conjunct"] == "a = b" and j["location"] == "spec/NoSuch.tla:3:5"
    assert j["verdict"] == "unknown" and j["first_violating_step"] == 1
    assert j["diff"] == [{"step": 1, "action": "B", "changes": {"a": ["1", "2"]}}]
    assert e.trace.steps[1].lane == "rank 1"
    assert any("not found" in n for n in j["notes"])


# ---------------------------------------------------------------- the spec bug twins
def _generated(spec: str):
    from hicache.monitors.codegen import module_name
    return importlib.import_module(f"hicache.monitors.generated.{module_name(spec)}")


@pytest.mark.parametrize("twin", ["HostTier_bug", "LayerPipeline_bug", "PPSync_bug", "DraftState_bug",
                                  "CPSharding_bug"])
def test_twin_trace(twin_traces, twin):
    from hicache.tla.cfg import load_cfg
    path = twin_traces[twin]
    meta = read_itf(path)["#meta"]
    e = explain(path)
    j = to_json(e)
    assert j["violated"] == meta["violated"]
    # the generated monitor (an independent compilation of the spec) agrees on the first
    # violating step: the invariant holds before it and fails there
    spec = twin.split("_bug")[0]
    gen = _generated(spec)
    C = gen.constants(dict(load_cfg(ROOT / "spec" / f"{twin}.cfg").constants))
    inv = gen.INVARIANTS[j["violated"]]
    doc = read_itf(path)
    fails = [inv(C, {v: decode(s[v]) for v in doc["vars"]}) is not None for s in doc["states"]]
    assert fails.index(True) == j["first_violating_step"]
    # the quoted conjunct is the spec's text at the reported place, inside the definition
    file, line, col = j["location"].rsplit(":", 2)
    lines = (ROOT / file).read_text().splitlines()
    assert lines[int(line) - 1][int(col) - 1:].startswith(j["conjunct"].splitlines()[0])
    d_line = int(j["definition_location"].rsplit(":", 2)[1])
    assert d_line <= int(line) <= d_line + j["conjunct"].count("\n") + 40
    # the definition's body starts on its `Name ==` line or the next one
    assert any(ln.startswith(j["violated"] + " ==") for ln in lines[d_line - 2:d_line])
    # a BFS counterexample is a behavior of the spec and as short as the spec's own
    assert j["trace_is_spec_behavior"] is True
    assert j["spec_shortest_length"] == j["trace_length"] == len(doc["states"])
    assert j["verdict"] == "spec"
    k = j["first_violating_step"]
    if k > 0:
        assert j["action"] == doc["states"][k]["#meta"]["action"]


def test_twin_trace_edited_is_not_a_spec_behavior(twin_traces, tmp_path):
    # hand-edit one state in the middle: the step into it is the implementation's
    doc = read_itf(twin_traces["HostTier_bug"])
    k = len(doc["states"]) // 2
    assert doc["states"][k]["len"] != encode(3)
    doc["states"][k]["len"] = encode(3)
    p = tmp_path / "edited.itf.json"
    write_itf(p, doc)
    e = explain(p)
    assert e.trace_is_spec_behavior is False
    assert e.divergence["step"] == k
    assert e.step_checks[k].status is StepStatus.NOT_ALLOWED
    assert e.verdict is Verdict.IMPLEMENTATION
    assert f"the implementation took a step the spec does not allow at step {k}" in e.verdict_text


def test_twin_trace_under_the_ci_model(twin_traces):
    # the bug twin's counterexample, read against the CI model (the bug flag off): its last
    # step is one the correct spec does not take, and the correct spec never violates it
    path = twin_traces["HostTier_bug"]
    n = len(read_itf(path)["states"])
    e = explain(path, Options(config=str(ROOT / "spec" / "HostTier.cfg")))
    assert e.trace_is_spec_behavior is False and e.divergence["step"] == n - 1
    assert e.verdict is Verdict.IMPLEMENTATION
    assert e.spec_search.status == "none"
    small = explain(path, Options(config=str(ROOT / "spec" / "HostTier.cfg"), max_states=1))
    assert small.spec_search.status == "budget" and small.spec_search.length is None


def test_options_validated(tmp_path):
    with pytest.raises(ValueError, match="max_states"):
        Options(max_states=0)
    with pytest.raises(ValueError, match="compound"):
        Options(compound=0)
    # a --spec or --config the user names must exist (it used to be reported as the trace's
    # own spec not found)
    with pytest.raises(ValueError, match=f"^spec: {tmp_path}/X.tla: no such file$"):
        Options(spec=str(tmp_path / "X.tla"))
    with pytest.raises(ValueError, match=f"^config: {tmp_path}/X.cfg: no such file$"):
        Options(config=str(tmp_path / "X.cfg"))


def test_deadlock_twin(tmp_path):
    from hicache.tla.run import check_one
    path = tmp_path / "noack.itf.json"
    _, payload, _ = check_one(str(ROOT / "spec" / "PrefixAgreement.tla"),
                              str(ROOT / "spec" / "PrefixAgreement_bug_noack.cfg"), trace_out=str(path))
    assert payload["result"] == "deadlock"
    e = explain(path)
    n = len(read_itf(path)["states"])
    assert e.kind == "deadlock" and e.first_violating_step == n - 1
    assert e.trace_is_spec_behavior is True
    assert e.spec_search.status == "found" and e.spec_search.length == n
    assert e.verdict is Verdict.SPEC and "deadlock" in e.verdict_text


# ---------------------------------------------------------------- a monitor's trace
def test_monitor_trace(pipeline_trace):
    doc = read_itf(pipeline_trace)
    v = doc["#meta"]["violation"]
    e = explain(pipeline_trace)
    j = to_json(e)
    last = len(doc["states"]) - 1
    assert e.trace.writer == "monitor" and j["kind"] == "action" and j["violated"] == "GatherStart"
    assert j["first_violating_step"] == last
    assert j["trace_is_spec_behavior"] is False and j["divergence"]["step"] == last
    # the monitor's generated check and explain's walk name the same conjunct and place
    assert " ".join(j["conjunct"].split()) == " ".join(v["conjunct"].split())
    assert j["location"] == v["location"]
    assert j["bindings"] == {"l": str(v["args"]["layer"])}
    # the monitor's trace starts after runtime event 1, not at an initial state
    assert j["step_checks"][0]["status"] == "unchecked"
    assert all(c["status"] == "spec_step" for c in j["step_checks"][1:last])
    assert j["spec_search"]["status"] == "found"
    assert j["verdict"] == "implementation"
    lanes = {s.lane for s in e.trace.steps}
    assert {f"rank {r}" for r in (0, 1, 2)} & lanes


def test_cli_json_and_text(pipeline_trace, tmp_path, capsys):
    from hicache.cli.main import main
    out = tmp_path / "p.html"
    assert main(["explain", str(pipeline_trace), "--json", "--html", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    j = json.loads(last)
    for key in ("violated", "first_violating_step", "action", "args", "conjunct", "location", "diff",
                "spec_shortest_length", "trace_is_spec_behavior", "verdict"):
        assert key in j
    assert j["html"] == str(out) and out.read_text().startswith("<!DOCTYPE html>")
    assert main(["explain", str(pipeline_trace)]) == 0
    text = capsys.readouterr().out
    assert "First violating step:" in text and "Failing conjunct at spec/LayerPipeline.tla:" in text
    assert "Verdict:" in text


def test_cli_html_that_cannot_be_written_keeps_the_report(tmp_path, capsys, pipeline_trace):
    """--html into a path that cannot be written: the analysis is still printed, the page's
    failure is named (stdout and stderr), exit 150 (EXIT_USAGE: a bad --html path); it was a
    traceback after the analysis."""
    from hicache.cli.main import EXIT_USAGE, main
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["explain", str(pipeline_trace), "--html", str(blocked / "x.html")]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert "Verdict:" in out and f"HTML page not written: {blocked / 'x.html'}" in out
    assert f"hicache explain: --html: cannot write {blocked / 'x.html'}" in err


def test_cli_unreadable(tmp_path, capsys):
    from hicache.cli.main import EXIT_USAGE, main
    p = tmp_path / "bad.json"
    p.write_text("{}")
    assert main(["explain", str(p)]) == EXIT_USAGE
    assert "not an ITF trace" in capsys.readouterr().err


@pytest.mark.parametrize("doc, where", [
    ({"vars": ["x"], "states": [1]}, "states[0]: a state is a JSON object"),
    ({"vars": "x", "states": [{"x": 1}]}, "vars: a list of variable names"),
    ({"#meta": "z", "states": [{"x": 1}]}, "#meta: an object"),
    ({"vars": ["x"], "states": [{"x": 1, "#meta": 3}]}, "states[0].#meta: an object"),
    ({"vars": ["x"], "states": [{"x": 1}, {"x": 1.5}]}, "states[1].x: not an ITF value"),
    ({"vars": ["x"], "states": [{"x": {"#bigint": "zz"}}]}, "states[0].x: not an ITF value"),
    ({"vars": ["x"], "#meta": {"constants": {"N": {"#set": 3}}}, "states": [{"x": 1}]},
     "#meta.constants.N: not an ITF value"),
])
def test_cli_malformed_trace_is_a_located_error(tmp_path, capsys, doc, where):
    """A malformed ITF trace is refused with the file and the field at fault (exit 150), not a
    traceback."""
    from hicache.cli.main import EXIT_USAGE, main
    p = tmp_path / "t.itf.json"
    p.write_text(json.dumps(doc))
    assert main(["explain", str(p)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hicache explain: {p}: {where}"), err


def test_search_constants_stay_on_the_trace_parameters_within_the_model():
    from hicache.explain.analysis import _search_constants
    model = {"N": 3, "S": frozenset({"a", "b", "c"}), "Bug": False, "M": 2}
    notes: list[str] = []
    got = _search_constants(model, {"N": 40, "S": frozenset({"b"}), "Bug": True, "M": 1}, notes)
    assert got == {"N": 3, "S": frozenset({"b"}), "Bug": True, "M": 1}
    assert notes == ["the spec search uses the trace's constants bounded by the model's: N = 40 -> 3"]
    assert _search_constants(model, None, notes) == model


def test_monitor_config_is_read_and_sample_mode_noted(tmp_path, pipeline_trace):
    doc = json.loads(pipeline_trace.read_text())
    assert doc["#meta"]["config"]["mode"] == "strict" and doc["#meta"]["config"]["action_checks"] is True
    assert doc["#meta"]["violation"].pop("checked_because") == "every step"    # (strict's; a sample one's below)
    doc["#meta"]["config"].update(mode="sample", sample_rate=0.25, seed=7)
    p = tmp_path / "sampled.itf.json"
    p.write_text(json.dumps(doc))
    e = explain(p)
    assert e.trace.verify["mode"] == "sample" and e.trace.config is None
    assert any(n.startswith("the monitor ran in sample mode (rate 0.25, seed 7)") for n in e.notes)
    assert "monitor: verify mode sample, seed 7, sample rate 0.25\n" in to_text(e)
    # drawn samples its budget let go are named beside the rate
    doc["#meta"]["config"].update(sample_budget=0.02, budget_skipped=3)
    p.write_text(json.dumps(doc))
    assert "sample rate 0.25, 3 drawn samples let go by the budget 0.02\n" in to_text(explain(p))
    # ... with what the budget had spent up to the violation, beside the monitor's lifetime
    doc["#meta"]["config"].update(checking_s=0.0015, alive_s=0.06)
    p.write_text(json.dumps(doc))
    assert ("3 drawn samples let go by the budget 0.02 (checking took 1.5 ms of the monitor's 60.0 ms, 2.5 %)\n"
            in to_text(explain(p)))
    del doc["#meta"]["config"]["checking_s"], doc["#meta"]["config"]["alive_s"]
    # ... and the events drawn apart at a multiple of the rate (HostTier's evictions)
    doc["#meta"]["config"].update(sample_probabilities={"HostEvict": 0.07 * 5, "DeviceEvict": 1.0})
    p.write_text(json.dumps(doc))
    assert "sample rate 0.25 (DeviceEvict at 1, HostEvict at 0.35), 3 drawn samples let go" in to_text(explain(p))
    # ... and the events the map's trigger checks whatever the draw (a strict trace has none)
    doc["#meta"]["config"].update(sample_triggers=["DeviceEvict", "HostEvict"], triggered=1)
    p.write_text(json.dumps(doc))
    assert ("(DeviceEvict at 1, HostEvict at 0.35); DeviceEvict, HostEvict of a node still held checked always, "
            "3 drawn samples let go") in to_text(explain(p))
    # ... and why the violating step was checked (the monitor's CheckCause)
    doc["#meta"]["violation"]["checked_because"] = "the map's trigger"
    p.write_text(json.dumps(doc))
    e = explain(p)
    assert "budget 0.02; the violating step checked by the map's trigger\n" in to_text(e)
    assert to_json(e)["checked_because"] == "the map's trigger"
    # the recorded constants are the ones used (not the CI model's note)
    assert e.constants_source == "trace" and not any("CI model" in n for n in e.notes)


SYM = """---- MODULE Sym ----
EXTENDS Naturals
VARIABLES a, b
Init == a = 0 /\\ b = 0
Next == \\/ a < 2 /\\ a' = a + 1 /\\ b' = b
        \\/ b < 2 /\\ b' = b + 1 /\\ a' = a
View == IF a <= b THEN <<a, b>> ELSE <<b, a>>
====
"""


def _sym_trace(tmp_path, states: list) -> Path:
    """A monitor's action-violation trace of Sym (VIEW View) through `states`: its last step
    is the one the monitor rejected."""
    spec = tmp_path / "Sym.tla"
    spec.write_text(SYM)
    (tmp_path / "Sym.cfg").write_text("INIT Init\nNEXT Next\nVIEW View\n")
    doc = {"#meta": {"format": "ITF", "source": str(spec), "module": "Sym",
                     "violation": {"kind": "action", "property": "Next", "action": "Next"}},
           "vars": ["a", "b"],
           "states": [{"#meta": {"index": i, "action": "Next"}, "a": encode(x), "b": encode(y)}
                      for i, (x, y) in enumerate(states)]}
    p = tmp_path / "sym.itf.json"
    write_itf(p, doc)
    return p


def test_the_pre_state_search_finds_the_exact_state_under_a_view(tmp_path):
    """The search for the state before a rejected step looks for one exact state; the
    config's VIEW merges it with a twin seen first (breadth-first, a = 2 /\\ b = 0 comes
    before a = 0 /\\ b = 2, and both have the view <<0, 2>>), whose successors stand for it
    but whose target test ran on the twin alone: the search ended "none". It runs without
    the VIEW (and SYMMETRY) now, and finds the state's shortest path."""
    e = explain(_sym_trace(tmp_path, [(0, 2), (2, 2)]))
    assert e.first_violating_step == 1
    assert e.spec_search.status == "found", e.spec_search
    assert e.spec_search.length == 3 and e.spec_search.actions == ["Next", "Next"]
    assert e.spec_search.target == "the state before step 1 (where Next was taken)"
    # the step the monitor rejected is not matched as several spec steps (two reach (2, 2)
    # from (0, 2), within `compound`: it read as a coarse event, the trace as a behavior)
    assert [c.status for c in e.step_checks] == [StepStatus.UNCHECKED, StepStatus.NOT_ALLOWED]
    assert "the monitor's action check rejected it" in e.step_checks[1].note
    assert e.trace_is_spec_behavior is False and e.divergence["step"] == 1


def test_the_pre_state_search_starts_where_the_traces_spec_steps_start(tmp_path):
    """The trace's own steps that are spec steps already reach the pre-state: the search
    is for the first state of that run (here the initial state, one test), not for the
    pre-state four steps deeper (a monitor's PPSync trace: 37 states in, past the budget at
    60 s, found now in 1 s); the report says which state it searched for and why."""
    e = explain(_sym_trace(tmp_path, [(0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (0, 0)]))
    assert e.first_violating_step == 5
    assert [c.status for c in e.step_checks[1:5]] == [StepStatus.SPEC_STEP] * 4
    assert e.spec_search.target == ("step 0's state, from which the trace's own spec steps 1..4 reach the state "
                                    "before step 5 (where Next was taken)")
    assert (e.spec_search.status, e.spec_search.length, e.spec_search.actions) == ("found", 1, [])
    assert "Spec's shortest path to step 0's state, from which the trace's own spec steps 1..4" in to_text(e)


def test_a_state_one_step_from_an_initial_state_is_found_without_a_search(tmp_path):
    """A pre-state one step from an initial state is found by testing that step, primed
    variables bound, on each initial state: a breadth-first search built every successor of
    the initial state first (DraftState's 131,072 launches with a monitor's constants,
    ~25 s, to find a state one step in)."""
    e = explain(_sym_trace(tmp_path, [(0, 1), (2, 2)]))
    assert e.first_violating_step == 1
    assert (e.spec_search.status, e.spec_search.length, e.spec_search.actions) == ("found", 2, ["Next"])
    assert e.spec_search.distinct == 0        # no state space explored
