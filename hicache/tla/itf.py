"""The Informal Trace Format (ITF, as Apalache and Quint write it) for behaviors.

Encoding: integers {"#bigint": "n"}, booleans and strings as JSON, sets {"#set": [...]},
sequences/tuples as JSON arrays, records as objects, other functions {"#map": [[k, v], ...]},
model values {"#unserializable": "name"}. `decode` inverts `encode` exactly.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hicache.tla.values import Fcn, ModelValue, is_set, sort_key, sorted_values


def encode(v: Any) -> Any:
    t = type(v)
    if t is bool or t is str:
        return v
    if t is int:
        return {"#bigint": str(v)}
    if t is ModelValue:
        return {"#unserializable": v.name}
    if t is tuple:
        return [encode(x) for x in v]
    if t is Fcn:
        if v.d and all(type(k) is str for k in v.d):
            return {k: encode(x) for k, x in sorted(v.d.items())}
        return {"#map": [[encode(k), encode(x)] for k, x in sorted(v.d.items(), key=lambda kv: sort_key(kv[0]))]}
    if is_set(v):
        return {"#set": [encode(x) for x in sorted_values(v)]}
    raise TypeError(f"cannot encode {v!r} in ITF")


def decode(j: Any) -> Any:
    if isinstance(j, bool) or isinstance(j, str):
        return j
    if isinstance(j, int):
        return j
    if isinstance(j, list):
        return tuple(decode(x) for x in j)
    if isinstance(j, dict):
        if "#bigint" in j:
            return int(j["#bigint"])
        if "#set" in j:
            return frozenset(decode(x) for x in j["#set"])
        if "#map" in j:
            from hicache.tla.values import mk_fcn
            return mk_fcn({decode(k): decode(x) for k, x in j["#map"]})
        if "#unserializable" in j:
            return ModelValue(j["#unserializable"])
        if "#tup" in j:
            return tuple(decode(x) for x in j["#tup"])
        return Fcn({k: decode(x) for k, x in j.items()})
    raise TypeError(f"cannot decode {j!r}")


def trace_to_itf(variables: list[str], steps, meta: dict) -> dict:
    """steps: iterable of (state tuple, action label or None)."""
    states = []
    for i, (state, action) in enumerate(steps):
        rec = {"#meta": {"index": i, "action": action}}
        for name, val in zip(variables, state):
            rec[name] = encode(val)
        states.append(rec)
    return {"#meta": dict(meta, format="ITF", **{"format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html"}),
            "vars": list(variables), "states": states}


def _dumps(doc: dict) -> str:
    """An ITF document as the text both writers put in a file."""
    return json.dumps(doc, indent=1) + "\n"


def write_itf(path: str | Path, doc: dict) -> None:
    Path(path).write_text(_dumps(doc))


def write_itf_new(directory: str | Path, stem: str, doc: dict) -> str:
    """Write `doc` as `<directory>/<stem>-<i>.itf.json` with the first unused i and return
    its path. A trace never overwrites another: each name is created exclusively, so two
    writers (threads, pytest-xdist workers sharing a directory) racing for the same i end up
    with two files. Raises OSError when the directory cannot be written: a monitor raising
    its violation catches it and names the directory and the error in the violation (no
    warning: a warnings filter set to "error" would replace the violation with it)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    text = _dumps(doc)
    i = 0
    while True:
        p = d / f"{stem}-{i}.itf.json"
        try:
            with open(p, "x") as fh:
                fh.write(text)
            return str(p)
        except FileExistsError:
            i += 1


def read_itf(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
