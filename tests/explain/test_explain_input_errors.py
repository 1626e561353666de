"""hicache explain on bad input: a located error (file, JSON field), exit 150, one JSON error
object under --json; a trace paired with another spec, or with constants the spec rejects,
is refused naming the trace field; options name their flag."""
from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from hicache.cli.main import EXIT_USAGE, main
from hicache.explain import Options, explain
from hicache.explain.trace import TraceError, load_trace
from hicache.tla.itf import encode

ROOT = Path(__file__).resolve().parents[2]
HOST_TIER = ROOT / "spec" / "HostTier.tla"
PP_SYNC = ROOT / "spec" / "PPSync.tla"

TINY = """---- MODULE Tiny ----
EXTENDS Naturals
CONSTANT N
VARIABLES x
ASSUME N \\in Nat
Init == x = 0
Up == x' = x + 1
Next == Up
Inv == x < N
====
"""


@pytest.fixture
def tiny(tmp_path) -> Path:
    spec = tmp_path / "Tiny.tla"
    spec.write_text(TINY)
    (tmp_path / "Tiny.cfg").write_text("CONSTANT N = 3\nINIT Init\nNEXT Next\nINVARIANT Inv\n")
    return spec


def _monitor_doc(spec: Path, **violation) -> dict:
    """A Tiny trace shaped as a monitor writes it (0 -> 1 -> ... -> 3, Inv false at 3)."""
    v = {"kind": "invariant", "property": "Inv", "action": "up", "args": {}} | violation
    return {"#meta": {"source": str(spec), "module": "Tiny", "violation": v, "constants": {"N": encode(3)}},
            "vars": ["x"],
            "states": [{"#meta": {"index": i, "action": "Up"}, "x": encode(i)} for i in range(4)]}


def _run(tmp_path, doc, *flags, text: str | None = None) -> tuple[int, str, str, Path]:
    """`hicache explain` on `doc` (or raw `text`): exit code, stdout, stderr, the trace path."""
    p = tmp_path / "t.itf.json"
    p.write_text(text if text is not None else json.dumps(doc))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["explain", str(p), *flags])
    return rc, out.getvalue(), err.getvalue(), p


def test_the_tiny_monitor_trace_is_explained(tmp_path, tiny):
    """The base the error cases below edit is itself a good trace."""
    e = explain(_write(tmp_path, _monitor_doc(tiny)))
    assert e.violated == "Inv" and e.first_violating_step == 3 and e.constants_source == "trace"


def _write(tmp_path, doc) -> Path:
    p = tmp_path / "ok.itf.json"
    p.write_text(json.dumps(doc))
    return p


# ---------------------------------------------------------------- fields of the wrong type
@pytest.mark.parametrize("edit, field, reason", [
    (lambda d: d["#meta"].update(source=5), "#meta.source", "a spec path, got 5"),
    (lambda d: d["#meta"].update(source=["a"]), "#meta.source", 'a spec path, got ["a"]'),
    (lambda d: d["#meta"].update(module=7), "#meta.module", "a module name, got 7"),
    (lambda d: d["#meta"]["violation"].update(property={"a": 1}), "#meta.violation.property", "a string"),
    (lambda d: d["#meta"]["violation"].update(property=["Inv"]), "#meta.violation.property", "a string"),
    (lambda d: d["#meta"]["violation"].update(kind=["invariant"]), "#meta.violation.kind", "a string"),
    (lambda d: d["#meta"]["violation"].update(location=7), "#meta.violation.location", "a string, got 7"),
    (lambda d: d["#meta"]["violation"].update(conjunct=7), "#meta.violation.conjunct", "a string, got 7"),
    (lambda d: d["#meta"]["violation"].update(args=[1, 2]), "#meta.violation.args", "an object"),
    (lambda d: d["#meta"]["violation"].update(divergence=3), "#meta.violation.divergence", "an object"),
    (lambda d: d["#meta"].update(violation="yes"), "#meta.violation", 'an object, got "yes"'),
    (lambda d: d["#meta"].update(constants=[1]), "#meta.constants", "an object"),
    (lambda d: d["#meta"].update(config=5), "#meta.config", "a config path or the monitor's verify settings"),
    (lambda d: d["states"][1]["#meta"].update(action={"a": 1}), "states[1].#meta.action", "an action name"),
    (lambda d: d.update({"#meta": {"result": ["invariant"]}}), "#meta.result", "a string"),
    (lambda d: d.update({"#meta": {"result": "invariant", "violated": {"x": 1}}}), "#meta.violated",
     "a property name"),
    (lambda d: d.update({"#meta": []}), "#meta", "an object, got []"),
])
def test_a_field_of_the_wrong_type_is_a_located_error(tmp_path, tiny, capsys, edit, field, reason):
    """Each was a traceback (TypeError, unhashable) deep in the analysis, or silently ignored."""
    doc = _monitor_doc(tiny)
    edit(doc)
    rc, out, err, p = _run(tmp_path, doc)
    assert rc == EXIT_USAGE
    assert err.startswith(f"hicache explain: {p}: {field}: {reason}"), err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("text", [
    '{"states": [{"x": ' + "[" * 100_000 + "]" * 100_000 + "}]}",
    '{"vars": ["x"], "states": [{"x": ' + '{"#set": [' * 50_000 + "]}" * 50_000 + "}]}",
], ids=["arrays", "sets"])
def test_deeply_nested_json_is_a_located_error(tmp_path, text):
    """json recurses per level: a RecursionError traceback before (QA's deep.json, deep2.json)."""
    rc, out, err, p = _run(tmp_path, None, text=text)
    assert rc == EXIT_USAGE
    assert err.strip() == f"hicache explain: {p}: not a usable ITF trace (JSON nested too deeply)", err


def test_a_value_nested_within_the_json_limit_is_handled(tmp_path):
    """Deep enough to parse, perhaps too deep to decode: a located error or a report, never
    a traceback."""
    for depth in (300, 600, 900):
        text = '{"vars": ["x"], "states": [{"x": ' + '{"#set": [' * depth + "]}" * depth + "}]}"
        rc, out, err, p = _run(tmp_path, None, "--json", text=text)
        assert rc in (0, EXIT_USAGE) and "Traceback" not in err, (depth, err)
        assert isinstance(json.loads(out.strip().splitlines()[-1]), dict)


def test_load_trace_raises_a_trace_error_with_the_field(tmp_path, tiny):
    doc = _monitor_doc(tiny)
    doc["#meta"]["violation"]["args"] = [1]
    with pytest.raises(TraceError) as ei:
        load_trace(_write(tmp_path, doc))
    assert ei.value.field == "#meta.violation.args" and ei.value.path.endswith("ok.itf.json")
    assert isinstance(ei.value, ValueError)      # callers catching ValueError still do


# ---------------------------------------------------------------- exit code and --json
def test_json_error_object_on_an_unusable_trace(tmp_path, tiny):
    """Exit 150 and one JSON error object last on stdout (it was exit 2, nothing on stdout)."""
    doc = _monitor_doc(tiny)
    doc["#meta"]["source"] = 5
    rc, out, err, p = _run(tmp_path, doc, "--json")
    assert rc == EXIT_USAGE
    j = json.loads(out.strip().splitlines()[-1])
    assert j == {"trace": str(p), "result": "error", "error": f"{p}: #meta.source: a spec path, got 5",
                 "field": "#meta.source"}
    assert err.startswith(f"hicache explain: {p}: #meta.source")


@pytest.mark.parametrize("text, why", [("", "not JSON"), ("{", "not JSON"), ("[1]", "not an ITF trace"),
                                       ('{"states": []}', "states: the trace has no state")])
def test_json_error_object_on_unreadable_files(tmp_path, text, why):
    rc, out, err, p = _run(tmp_path, None, "--json", text=text)
    assert rc == EXIT_USAGE
    j = json.loads(out.strip().splitlines()[-1])
    assert j["result"] == "error" and j["error"].startswith(f"{p}: {why}")


def test_json_error_object_on_a_missing_file_and_a_spec_error(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "none.json"), "--json"]) == EXIT_USAGE
    j = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert j["result"] == "error" and j["error"].startswith(f"cannot read {tmp_path / 'none.json'}")
    # a spec that does not parse: the spec's location, as `hicache check --json` reports it
    bad = tmp_path / "Bad.tla"
    bad.write_text("no module here\n")
    doc = {"#meta": {"source": str(bad)}, "vars": ["x"], "states": [{"x": 1}]}
    rc, out, err, p = _run(tmp_path, doc, "--json")
    assert rc == EXIT_USAGE and err.startswith("Error: ")
    j = json.loads(out.strip().splitlines()[-1])
    assert j["result"] == "error" and j["location"].startswith(str(bad)) and "parse error" in j["error"]


def test_non_utf8_trace(tmp_path):
    p = tmp_path / "t.itf.json"
    p.write_bytes(b"\xff\xfegarbage")
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["explain", str(p)]) == EXIT_USAGE
    assert err.getvalue().startswith(f"hicache explain: {p}: not UTF-8 text")


# ---------------------------------------------------------------- recorded constants
def test_a_bad_recorded_constant_names_the_trace_field(tmp_path, tiny):
    """It was reported as the spec's ASSUME line only (`Tiny.tla:5:8: ASSUME is violated`)."""
    doc = _monitor_doc(tiny)
    doc["#meta"]["constants"]["N"] = "three"
    rc, out, err, p = _run(tmp_path, doc, "--json")
    assert rc == EXIT_USAGE
    j = json.loads(out.strip().splitlines()[-1])
    assert j["field"] == "#meta.constants.N"
    assert j["error"].startswith(f'{p}: #meta.constants.N: "three" does not fit the spec (')
    assert "ASSUME is violated" in j["error"]


def test_a_bad_recorded_constant_of_host_tier(tmp_path, twin_traces):
    """QA's case: HostTier with NNodes = "three"."""
    doc = json.loads(twin_traces["HostTier_bug"].read_text())
    doc["#meta"]["constants"] = {"NNodes": "three"}
    doc["#meta"]["config"] = str(ROOT / "spec" / "HostTier.cfg")
    rc, out, err, p = _run(tmp_path, doc)
    assert rc == EXIT_USAGE
    assert err.startswith(f'hicache explain: {p}: #meta.constants.NNodes: "three" does not fit the spec'), err


def test_an_unknown_recorded_constant_is_noted(tmp_path, tiny):
    doc = _monitor_doc(tiny)
    doc["#meta"]["constants"]["Bogus"] = encode(1)
    e = explain(_write(tmp_path, doc))
    assert any(n.startswith("#meta.constants: Bogus is not a constant of") for n in e.notes), e.notes


# ---------------------------------------------------------------- a trace and another spec
def test_a_trace_with_another_spec_is_refused(tmp_path, twin_traces):
    """--spec spec/PPSync.tla on a HostTier trace: exit 0 quoting HostTier locations before."""
    src = twin_traces["HostTier_bug"]
    rc, out, err, p = _run(tmp_path, json.loads(src.read_text()), "--spec", str(PP_SYNC), "--json")
    assert rc == EXIT_USAGE
    j = json.loads(out.strip().splitlines()[-1])
    assert j["field"] == "vars"
    assert "are not variables of --spec spec/PPSync.tla" in j["error"] and "module PPSync" in j["error"]
    assert "the trace names spec/HostTier.tla" in j["error"]


def test_a_trace_naming_another_spec_as_its_source_is_refused(tmp_path, twin_traces):
    doc = json.loads(twin_traces["HostTier_bug"].read_text())
    doc["#meta"]["source"] = "spec/PPSync.tla"
    rc, out, err, p = _run(tmp_path, doc)
    assert rc == EXIT_USAGE
    assert err.startswith(f"hicache explain: {p}: vars: ") and \
        "not variables of the spec the trace names (#meta.source) spec/PPSync.tla" in err, err


def test_a_module_mismatch_is_refused(tmp_path, tiny):
    doc = _monitor_doc(tiny)
    doc["#meta"]["module"] = "HostTier"
    rc, out, err, p = _run(tmp_path, doc)
    assert rc == EXIT_USAGE
    assert err.startswith(f"hicache explain: {p}: #meta.module: the trace is of module HostTier, but the "
                          f"spec the trace names (#meta.source) "), err
    assert "is module Tiny" in err


@pytest.mark.parametrize("meta, field, says", [
    ({"violation": {"kind": "invariant", "property": "Nope"}}, "#meta.violation.property",
     "Nope is not defined in"),
    ({"violation": {"kind": "action", "property": "NoSuchAction"}}, "#meta.violation.property",
     "NoSuchAction is not an action of"),
    # a constant is defined, but is not an action
    ({"violation": {"kind": "action", "property": "N"}}, "#meta.violation.property", "N is not an action of"),
    ({"violation": None, "result": "invariant", "violated": "Nope"}, "#meta.violated", "Nope is not defined in"),
])
def test_an_unknown_property_or_action_is_refused(tmp_path, tiny, meta, field, says):
    doc = _monitor_doc(tiny)
    doc["#meta"].update(meta)
    if doc["#meta"]["violation"] is None:
        del doc["#meta"]["violation"]
    rc, out, err, p = _run(tmp_path, doc)
    assert rc == EXIT_USAGE
    assert err.startswith(f"hicache explain: {p}: {field}: {says}"), err


def test_an_unknown_step_action_of_a_check_trace_is_refused(tmp_path, tiny):
    """`hicache check` names spec actions: a name the spec lacks means another spec."""
    doc = _monitor_doc(tiny)
    doc["#meta"] = {"source": str(tiny), "config": str(tiny.with_suffix(".cfg")), "result": "invariant",
                    "violated": "Inv"}
    doc["states"][2]["#meta"]["action"] = "Down"
    rc, out, err, p = _run(tmp_path, doc)
    assert rc == EXIT_USAGE
    assert err.startswith(f"hicache explain: {p}: states[2].#meta.action: Down is not an action of"), err
    # a monitor's steps name runtime events: not checked
    doc = _monitor_doc(tiny)
    doc["states"][2]["#meta"]["action"] = "runtime_event"
    assert explain(_write(tmp_path, doc)).violated == "Inv"


def test_runtime_properties_are_not_looked_up_in_the_spec(tmp_path, tiny):
    doc = _monitor_doc(tiny, kind="runtime", property="WorkersAlive")
    e = explain(_write(tmp_path, doc))
    assert e.kind == "runtime" and e.violated == "WorkersAlive"


# ---------------------------------------------------------------- options
@pytest.mark.parametrize("flags, says", [
    (["--max-seconds", "nan"], "--max-seconds: must be a finite number > 0, got nan"),
    (["--max-seconds", "inf"], "--max-seconds: must be a finite number > 0, got inf"),
    (["--max-seconds", "0"], "--max-seconds: must be a finite number > 0, got 0.0"),
    (["--max-states", "0"], "--max-states: must be >= 1, got 0"),
    (["--compound", "0"], "--compound: must be >= 1, got 0"),
    (["--diff-steps", "-1"], "--diff-steps: must be >= 1, got -1"),
])
def test_options_name_their_flag(tmp_path, tiny, flags, says):
    rc, out, err, p = _run(tmp_path, _monitor_doc(tiny), *flags, "--json")
    assert rc == EXIT_USAGE
    assert err.strip() == f"hicache explain: {says}"
    assert json.loads(out.strip().splitlines()[-1])["error"] == says


def test_options_reject_non_finite_seconds():
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="^max_seconds: must be a finite number > 0"):
            Options(max_seconds=bad)


def test_html_onto_the_trace_itself_is_refused(tmp_path, tiny):
    doc = _monitor_doc(tiny)
    p = _write(tmp_path, doc)
    before = p.read_text()
    link = tmp_path / "link.json"
    link.symlink_to(p)
    for target in (str(p), str(link), str(tmp_path / "." / p.name)):
        err = io.StringIO()
        with redirect_stderr(err):
            assert main(["explain", str(p), "--html", target]) == EXIT_USAGE
        assert err.getvalue().startswith(f"hicache explain: --html: {target} is the trace itself"), err.getvalue()
        assert p.read_text() == before
