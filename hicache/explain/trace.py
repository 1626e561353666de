"""Read a violation trace (ITF) into typed records, whoever wrote it.

Two writers are understood, and any ITF trace degrades gracefully:
  hicache check   `#meta`: source (spec path), config, result, violated; each state's
                  `#meta`: index, action (None for the initial state).
  monitors        `#meta`: source, module, violation {kind, property, index, conjunct,
                  location, error, action, checked_because, args}; each state's `#meta`:
                  index, step (the runtime's event number), action, args. The first state
                  is the state after the oldest recorded event, not an initial state.
  cross-rank      (hicache.monitors.digest) as monitors, with violation kind "digest" and no
                  spec: every variable is a function rank -> value, each state's `#meta`
                  names the rank whose event it follows; the last state is the exchange.
Optional fields read when present: `#meta.constants` (ITF-encoded, the constants the run
used), `#meta.config` (a config file path, as `hicache check` writes it, or the monitor's
verify settings {mode, seed, sample_rate, sample_budget, budget_window, budget_skipped, history,
sample_probabilities, sample_triggers, triggered, action_checks}, and under a budget checking_s
and alive_s: the seconds spent checking and since the monitor was made), and a `rank`/`stage` in
a state's `#meta` or its args (timeline lanes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache.tla.itf import decode, read_itf

#: the value of a variable a state does not record (a monitor may map only some variables)
MISSING = None

#: field or action-parameter name -> timeline lane kind (the specs name a stage `s` and a
#: rank `r` in their actions: StageApply(s), RankRestoreLayer(r, l), TransferComplete(t, s, r))
LANE_KEYS = {"stage": "stage", "s": "stage", "rank": "rank", "r": "rank"}

_REPO = Path(__file__).resolve().parents[2]


@dataclass(slots=True)
class TraceStep:
    index: int                    # position in the trace (0-based)
    action: str | None            # the action/event that led to this state (None: initial)
    args: dict                    # its arguments as recorded (JSON values)
    runtime_step: int | None      # the runtime's event number (monitor traces)
    lane: str | None              # "rank 0", "stage 2", or None (one lane)
    values: dict[str, Any]        # variable -> TLA+ value (variables the state lacks are absent)
    exchange: bool = False        # cross-rank: a contribution to the exchange that disagreed


@dataclass(slots=True)
class Violation:
    """What the writer says was violated (absent fields are None)."""
    kind: str | None = None        # invariant | action | deadlock | digest | property
    property: str | None = None
    conjunct: str | None = None
    location: str | None = None
    action: str | None = None
    args: dict = field(default_factory=dict)
    error: str | None = None
    divergence: dict | None = None   # cross-rank: what the writer found diverging
    checked_because: str | None = None   # monitors: why the violating step was checked


@dataclass(slots=True)
class Trace:
    path: str
    writer: str                    # "check" | "monitor" | "itf"
    variables: list[str]
    steps: list[TraceStep]
    violation: Violation
    spec: Path | None              # resolved spec file (None: not found)
    spec_named: str | None         # as the trace names it
    config: Path | None            # resolved config (None: not recorded / not found)
    constants: dict[str, Any] | None   # the run's constants, when recorded
    meta: dict
    verify: dict | None = None     # a monitor's verify settings (mode, seed, sample_rate, ...)


class TraceError(ValueError):
    """A trace that cannot be used: the file, the JSON field at fault (None: the whole
    file) and why, so the CLI reports it located (also as JSON) rather than a traceback."""

    def __init__(self, path: str | Path, field: str | None, reason: str) -> None:
        self.path, self.field, self.reason = str(path), field, reason
        super().__init__(f"{path}: {field}: {reason}" if field else f"{path}: {reason}")


def resolve(name: str | None, trace_dir: Path) -> Path | None:
    """A path the trace names: as given, beside the trace, or under the repository root."""
    if not name:
        return None
    p = Path(name)
    for cand in (p, trace_dir / p, _REPO / p):
        if cand.is_file():
            return cand
    return None


def lane_of(*sources: dict) -> str | None:
    """"stage 1 rank 0" from the first source naming a stage and/or a rank; None: no lane."""
    for src in sources:
        got = {}
        for k, kind in LANE_KEYS.items():
            v = src.get(k)
            if kind not in got and isinstance(v, (int, str)) and not isinstance(v, bool):
                got[kind] = v
        if got:
            return " ".join(f"{kind} {got[kind]}" for kind in ("stage", "rank") if kind in got)
    return None


def _decode_at(path: Path, where: str, j):
    """An ITF value decoded, or TraceError naming the file and the field it sits in."""
    try:
        return decode(j)
    except (TypeError, ValueError) as e:
        raise TraceError(path, where, f"not an ITF value ({e})") from None
    except RecursionError:
        raise TraceError(path, where, "not an ITF value (nested too deeply)") from None


def _show(j) -> str:
    try:
        return json.dumps(j)[:60]
    except RecursionError:
        return "(a value nested too deeply)"


def _field(path: Path, where: str, obj: dict, key: str, types: tuple[type, ...], want: str):
    """obj[key] when it is None or one of `types`; else TraceError naming the file and the
    field (a writer's field of another type would crash the analysis far from its cause)."""
    x = obj.get(key)
    if x is None or (isinstance(x, types) and not isinstance(x, bool)):
        return x
    raise TraceError(path, where + key, f"{want}, got {_show(x)}")


def _read(path: Path):
    """The JSON document; TraceError (naming the file) when it cannot be parsed."""
    try:
        return read_itf(path)
    except UnicodeDecodeError as e:
        raise TraceError(path, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise TraceError(path, None, f"not JSON ({e})") from None
    except RecursionError:
        # json recurses per nesting level: a pathological file must not be a traceback
        raise TraceError(path, None, "not a usable ITF trace (JSON nested too deeply)") from None


def load_trace(path: str | Path) -> Trace:
    """Parse an ITF file; TraceError (naming the field) when it is not a usable trace."""
    path = Path(path)
    doc = _read(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("states"), list):
        raise TraceError(path, None, "not an ITF trace (no 'states' list)")
    meta = doc.get("#meta")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise TraceError(path, "#meta", f"an object, got {_show(meta)}")
    states = doc["states"]
    if not states:
        raise TraceError(path, "states", "the trace has no state")
    for i, rec in enumerate(states):
        if not isinstance(rec, dict):
            raise TraceError(path, f"states[{i}]", f"a state is a JSON object, got {_show(rec)}")
    raw_vars = doc.get("vars")
    if raw_vars is not None and not (isinstance(raw_vars, list) and all(isinstance(v, str) for v in raw_vars)):
        raise TraceError(path, "vars", f"a list of variable names, got {_show(raw_vars)}")
    variables = list(raw_vars or [k for k in states[0] if not k.startswith("#")])
    steps = []
    for i, rec in enumerate(states):
        smeta = rec.get("#meta")
        smeta = {} if smeta is None else smeta
        if not isinstance(smeta, dict):
            raise TraceError(path, f"states[{i}].#meta", f"an object, got {_show(smeta)}")
        action = _field(path, f"states[{i}].#meta.", smeta, "action", (str,), "an action name")
        args = smeta.get("args") or {}
        if not isinstance(args, dict):
            args = {"args": args}
        values = {v: _decode_at(path, f"states[{i}].{v}", rec[v]) for v in variables if v in rec}
        rstep = smeta.get("step")
        steps.append(TraceStep(i, action, args, rstep if isinstance(rstep, int) else None,
                               lane_of(smeta, args), values, smeta.get("exchange") is True))
    source = _field(path, "#meta.", meta, "source", (str,), "a spec path")
    _field(path, "#meta.", meta, "module", (str,), "a module name")
    raw_v = meta.get("violation")
    if raw_v is not None and not isinstance(raw_v, dict):
        raise TraceError(path, "#meta.violation", f"an object, got {_show(raw_v)}")
    if isinstance(raw_v, dict):
        writer = "monitor"
        w = "#meta.violation."
        strs = {k: _field(path, w, raw_v, k, (str,), "a string")
                for k in ("kind", "property", "conjunct", "location", "action", "error", "checked_because")}
        v = Violation(strs["kind"], strs["property"], strs["conjunct"], strs["location"], strs["action"],
                      _field(path, w, raw_v, "args", (dict,), "an object (argument -> value)") or {},
                      strs["error"], _field(path, w, raw_v, "divergence", (dict,), "an object"),
                      strs["checked_because"])
    elif "result" in meta:
        writer = "check"
        result = _field(path, "#meta.", meta, "result", (str,), "a string")
        kind = {"invariant": "invariant", "property": "property", "deadlock": "deadlock"}.get(result)
        v = Violation(kind=kind, property=_field(path, "#meta.", meta, "violated", (str,), "a property name"),
                      action=steps[-1].action)
    else:
        writer = "itf"
        v = Violation()
    trace_dir = path.parent
    raw_c = _field(path, "#meta.", meta, "constants", (dict,), "an object (constant -> ITF value)")
    constants = None
    if raw_c is not None:
        constants = {k: _decode_at(path, f"#meta.constants.{k}", x) for k, x in raw_c.items()}
    cfg = _field(path, "#meta.", meta, "config", (str, dict), "a config path or the monitor's verify settings")
    verify = cfg if isinstance(cfg, dict) else None
    cfg_path = resolve(cfg, trace_dir) if isinstance(cfg, str) else None
    return Trace(str(path), writer, variables, steps, v, resolve(source, trace_dir),
                 source, cfg_path, constants, meta, verify)
