"""`hicache check --all`: re-check every model of models_checked/manifest.json.

Each entry fixes a model's expected result. For models that pass, the exact distinct and
generated counts and the depth must match (they do not depend on exploration order). For
bug twins, the violated property and the length of the (shortest) counterexample must
match; counts at the moment of a violation depend on the order within a BFS level, so
they are recorded but not compared. The counterexample itself (its states and actions; the
exploration order is pinned) must equal the committed ITF beside the manifest, so a spec
change that alters it cannot leave a stale trace behind (`hicache explain` and the docs read
them). `--rewrite` re-records the manifest and the committed counterexamples (ITF JSON and
TLC-style text) to be reviewed as a diff.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hicache import REPO_ROOT
from hicache.cli.output import emit


@dataclass
class Entry:
    name: str
    spec: str
    cfg: str
    expected_result: str
    distinct: int | None = None
    generated: int | None = None
    depth: int | None = None
    violated: str | None = None
    trace_length: int | None = None
    slow: bool = False
    mode: str = "bfs"           # bfs | simulate
    note: str = ""


def manifest_path(args) -> Path:
    return Path(args.manifest) if getattr(args, "manifest", None) else REPO_ROOT / "models_checked" / "manifest.json"


def load_manifest(path: Path) -> list[Entry]:
    doc = json.loads(path.read_text())
    return [Entry(**m) for m in doc["models"]]


def _itf_of(e: Entry, res) -> dict | None:
    from hicache.tla.itf import trace_to_itf
    if not res.trace:
        return None
    steps = [(s.state, None if s.action is None else s.action.name) for s in res.trace]
    return trace_to_itf(res.variables, steps, {
        "source": e.spec, "config": e.cfg, "result": res.result, "violated": res.violated})


def stale_trace(e: Entry, res, committed_dir: Path) -> str | None:
    """How the committed counterexample of a bug twin differs from the one found now (None:
    equal; a missing committed file is a difference too). States and actions are compared as
    their ITF JSON (line numbers, which move with any spec edit, are not in it)."""
    from hicache.tla.itf import read_itf
    path = committed_dir / f"{e.name}.itf.json"
    doc = _itf_of(e, res)
    if doc is None:
        return None
    if not path.exists():
        return f"no committed counterexample {path.name} (run `hicache check --all --rewrite` and review it)"
    old = read_itf(path)
    now = json.loads(json.dumps(doc))       # (the JSON form: tuples as lists)
    if old.get("vars") != now["vars"]:
        return f"committed counterexample {path.name} has variables {old.get('vars')}, not {now['vars']}"
    before = old.get("states", [])
    for i, (a, b) in enumerate(zip(before, now["states"])):
        if a != b:
            return (f"committed counterexample {path.name} differs at state {i + 1} "
                    f"(run `hicache check --all --rewrite` and review the diff)")
    if len(before) != len(now["states"]):
        return (f"committed counterexample {path.name} has {len(before)} states, the one found now "
                f"{len(now['states'])} (run `hicache check --all --rewrite` and review the diff)")
    return None


def check_entry(e: Entry, root: Path, out_dir: Path | None, allow_unchecked_properties: bool = False):
    from hicache.tla.cfg import load_cfg
    from hicache.tla.checker import Checker, build
    from hicache.tla.errors import TlaError
    from hicache.tla.itf import write_itf
    from hicache.tla.report import summary_text
    try:
        ck = build(root / e.spec, load_cfg(root / e.cfg), allow_unchecked_properties=allow_unchecked_properties)
        checker = Checker(ck)
        res = checker.simulate(100, 200, 0) if e.mode == "simulate" else checker.run()
    except TlaError as exc:
        from hicache.tla.checker import Result
        res = Result("error", error=exc)
    if out_dir is not None and res.trace:
        write_itf(out_dir / f"{e.name}.itf.json", _itf_of(e, res))
        (out_dir / f"{e.name}.txt").write_text(summary_text(res).rsplit("\nFinished in", 1)[0] + "\n")
    return res


def compare(e: Entry, res) -> list[str]:
    diffs = []
    if res.result != e.expected_result:
        diffs.append(f"result {res.result} != expected {e.expected_result}"
                     + (f" ({res.error})" if res.error else ""))
        return diffs
    if e.expected_result == "ok" and e.mode == "bfs":
        for f in ("distinct", "generated", "depth"):
            if getattr(e, f) is not None and getattr(res, f) != getattr(e, f):
                diffs.append(f"{f} {getattr(res, f)} != expected {getattr(e, f)}")
    else:
        if e.violated != res.violated:
            diffs.append(f"violated {res.violated} != expected {e.violated}")
        n = len(res.trace or [])
        if e.trace_length is not None and e.mode == "bfs" and n != e.trace_length:
            diffs.append(f"counterexample length {n} != expected {e.trace_length}")
    return diffs


def run_all(args: argparse.Namespace) -> int:
    path = manifest_path(args)
    if not path.exists():
        emit(args, {"models": [], "ok": False, "error": f"no manifest at {path}"}, f"no manifest at {path}")
        return 150
    root = path.parent.parent
    entries = load_manifest(path)
    rewrite = getattr(args, "rewrite", False)
    rows, ok, lines = [], True, []
    t0 = time.perf_counter()
    for e in entries:
        if e.slow and not args.include_slow:
            rows.append({"name": e.name, "result": "skipped", "expected_result": e.expected_result,
                         "distinct": None, "generated": None, "match": True, "skipped": True})
            continue
        res = check_entry(e, root, path.parent if rewrite else None,
                          getattr(args, "allow_unchecked_properties", False))
        if rewrite:
            e.distinct, e.generated, e.depth = res.distinct, res.generated, res.depth
            e.violated = res.violated
            e.trace_length = len(res.trace) if res.trace else None
            if res.result != "error":
                e.expected_result = res.result
        diffs = compare(e, res)
        if not diffs and e.mode == "bfs" and e.expected_result != "ok":
            stale = stale_trace(e, res, path.parent)
            if stale:
                diffs.append(stale)
        ok &= not diffs
        rows.append({"name": e.name, "result": res.result, "expected_result": e.expected_result,
                     "distinct": res.distinct, "generated": res.generated, "depth": res.depth,
                     "violated": res.violated, "seconds": round(res.seconds, 3), "match": not diffs,
                     "diffs": diffs})
        mark = "ok  " if not diffs else "FAIL"
        lines.append(f"{mark} {e.name:<28} {res.result:<9} distinct={res.distinct:<8} generated={res.generated:<9} "
                     f"depth={res.depth:<4} {('violated=' + res.violated) if res.violated else ''} "
                     f"{'; '.join(diffs)}")
        if not args.json:
            print(lines[-1], flush=True)
    if rewrite:
        path.write_text(json.dumps({"models": [asdict(e) for e in entries]}, indent=1) + "\n")
    summary = f"{sum(r['match'] for r in rows)}/{len(rows)} models match ({time.perf_counter() - t0:.1f}s)"
    emit(args, {"models": rows, "ok": ok, "seconds": round(time.perf_counter() - t0, 2)}, summary)
    return 0 if ok else 1
