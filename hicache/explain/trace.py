"""Read a violation trace (ITF) into typed records, whoever wrote it.

Two writers are understood, and any ITF trace degrades gracefully:
  hicache check   `#meta`: source (spec path), config, result, violated; each state's
                  `#meta`: index, action (None for the initial state).
  monitors        `#meta`: source, module, violation {kind, property, index, conjunct,
                  location, error, action, args}; each state's `#meta`: index, step (the
                  runtime's event number), action, args. The first state is the state after
                  the oldest recorded event, not an initial state.
  cross-rank      (hicache.monitors.digest) as monitors, with violation kind "digest" and no
                  spec: every variable is a function rank -> value, each state's `#meta`
                  names the rank whose event it follows; the last state is the exchange.
Optional fields read when present: `#meta.constants` (ITF-encoded, the constants the run
used), `#meta.config` (a config file path, as `hicache check` writes it, or the monitor's
verify settings {mode, seed, sample_rate, history, action_checks}), and a `rank`/`stage` in
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
    """An ITF value decoded, or ValueError naming the file and the field it sits in."""
    try:
        return decode(j)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {where}: not an ITF value ({e})") from None


def load_trace(path: str | Path) -> Trace:
    """Parse an ITF file; ValueError (naming the field) when it is not a usable trace."""
    path = Path(path)
    doc = read_itf(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("states"), list):
        raise ValueError(f"{path}: not an ITF trace (no 'states' list)")
    meta = doc.get("#meta") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: #meta: an object, got {json.dumps(meta)[:60]}")
    states = doc["states"]
    if not states:
        raise ValueError(f"{path}: states: the trace has no state")
    for i, rec in enumerate(states):
        if not isinstance(rec, dict):
            raise ValueError(f"{path}: states[{i}]: a state is a JSON object, got {json.dumps(rec)[:60]}")
    raw_vars = doc.get("vars")
    if raw_vars is not None and not (isinstance(raw_vars, list) and all(isinstance(v, str) for v in raw_vars)):
        raise ValueError(f"{path}: vars: a list of variable names, got {json.dumps(raw_vars)[:60]}")
    variables = list(raw_vars or [k for k in states[0] if not k.startswith("#")])
    steps = []
    for i, rec in enumerate(states):
        smeta = rec.get("#meta") or {}
        if not isinstance(smeta, dict):
            raise ValueError(f"{path}: states[{i}].#meta: an object, got {json.dumps(smeta)[:60]}")
        args = smeta.get("args") or {}
        if not isinstance(args, dict):
            args = {"args": args}
        values = {v: _decode_at(path, f"states[{i}].{v}", rec[v]) for v in variables if v in rec}
        rstep = smeta.get("step")
        steps.append(TraceStep(i, smeta.get("action"), args, rstep if isinstance(rstep, int) else None,
                               lane_of(smeta, args), values, smeta.get("exchange") is True))
    raw_v = meta.get("violation")
    if isinstance(raw_v, dict):
        writer = "monitor"
        div = raw_v.get("divergence")
        v = Violation(raw_v.get("kind"), raw_v.get("property"), raw_v.get("conjunct"), raw_v.get("location"),
                      raw_v.get("action"), raw_v.get("args") or {}, raw_v.get("error"),
                      div if isinstance(div, dict) else None)
    elif "result" in meta:
        writer = "check"
        kind = {"invariant": "invariant", "property": "property", "deadlock": "deadlock"}.get(meta["result"])
        v = Violation(kind=kind, property=meta.get("violated"), action=steps[-1].action)
    else:
        writer = "itf"
        v = Violation()
    trace_dir = path.parent
    constants = None
    if isinstance(meta.get("constants"), dict):
        constants = {k: _decode_at(path, f"#meta.constants.{k}", x) for k, x in meta["constants"].items()}
    cfg = meta.get("config")
    verify = cfg if isinstance(cfg, dict) else None
    cfg_path = resolve(cfg, trace_dir) if isinstance(cfg, str) else None
    return Trace(str(path), writer, variables, steps, v, resolve(meta.get("source"), trace_dir),
                 meta.get("source"), cfg_path, constants, meta, verify)
