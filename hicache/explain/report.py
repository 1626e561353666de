"""An explanation as text for people and as one JSON object for tools."""
from __future__ import annotations

from hicache.explain.analysis import Explanation


def _args_text(args: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items() if k != "seq")


def to_json(e: Explanation) -> dict:
    f = e.finding
    s = e.spec_search
    return {
        "trace": e.trace.path,
        "writer": e.trace.writer,
        "spec": e.spec,
        "config": e.config,
        "constants_source": e.constants_source,
        "violated": e.violated,
        "kind": e.kind,
        "first_violating_step": e.first_violating_step,
        "trace_length": e.trace_length,
        "action": e.action,
        "args": e.args,
        "conjunct": f.conjunct.text if f else None,
        "location": f.conjunct.location if f else None,
        "definition_location": f.top.location if f else None,
        "bindings": dict(f.bindings) if f else {},
        "diff": e.diff,
        "trace_is_spec_behavior": e.trace_is_spec_behavior,
        "divergence": e.divergence,
        "step_checks": [{"step": c.index, "status": str(c.status), "actions": c.actions, "note": c.note}
                        for c in e.step_checks],
        "spec_search": None if s is None else {"target": s.target, "status": s.status, "length": s.length,
                                                "actions": s.actions, "distinct": s.distinct,
                                                "seconds": round(s.seconds, 3), "note": s.note},
        "spec_shortest_length": s.length if s is not None else None,
        "ranks": e.ranks,
        "search_constants": e.search_constants,
        "verify": e.trace.verify,
        # (why the monitor checked the violating step: every step, a draw, a trigger, ...)
        "checked_because": e.trace.violation.checked_because,
        "verdict": str(e.verdict),
        "verdict_text": e.verdict_text,
        "notes": e.notes,
    }


def to_text(e: Explanation) -> str:
    out = []
    what = f"{e.kind or 'violation'} {e.violated or ''}".strip()
    out.append(f"{e.trace.path}: {what}")
    if e.ranks is not None:
        out.append(f"  cross-rank exchange of ranks {', '.join(map(str, e.ranks['ranks']))} (property of "
                   f"{e.finding.conjunct.location if e.finding else '?'}, no spec); written by "
                   f"{e.trace.writer}; {e.trace_length} states")
    else:
        out.append(f"  spec {e.spec or '?'}, config {e.config or '?'} (constants from {e.constants_source}); "
                   f"written by {e.trace.writer}; {e.trace_length} states")
    if e.trace.verify:
        v = e.trace.verify
        # (the rate and seed say which steps a sample-mode monitor checked; strict checks all)
        sampled = f", seed {v.get('seed')}, sample rate {v.get('sample_rate')}" if v.get("mode") == "sample" else ""
        drawn = v.get("sample_probabilities")
        if sampled and isinstance(drawn, dict) and drawn:
            # (events drawn each on its own, at a multiple of the rate: the map's sample_weights)
            sampled += " (" + ", ".join(f"{a} at {p:g}" if isinstance(p, (int, float)) else f"{a} at {p}"
                                        for a, p in sorted(drawn.items())) + ")"
        held = v.get("sample_triggers")
        if sampled and isinstance(held, list) and held:
            # (events the map's trigger checks whatever the draw: evictions of a held node)
            sampled += f"; {', '.join(map(str, held))} of a node still held checked always"
        if sampled and v.get("budget_skipped"):
            # (drawn samples the budget let go: the seed's steps that were not checked)
            sampled += f", {v['budget_skipped']} drawn samples let go by the budget {v.get('sample_budget')}"
        spent, alive = v.get("checking_s"), v.get("alive_s")
        if sampled and isinstance(spent, (int, float)) and isinstance(alive, (int, float)) and alive > 0:
            # (what the budget bounds, as spent up to the violation: why more was not checked)
            sampled += f" (checking took {spent * 1e3:.1f} ms of the monitor's {alive * 1e3:.1f} ms, " \
                       f"{100 * spent / alive:.1f} %)"
        because = e.trace.violation.checked_because
        if sampled and because:
            # (what a sample-mode catch owes its check to: a draw, the map's trigger, a cache check)
            sampled += f"; the violating step checked by {because}"
        out.append(f"  monitor: verify mode {v.get('mode')}{sampled}")
    k = e.first_violating_step
    if k is not None:
        rs = e.trace.steps[k].runtime_step
        at = f"step {k}" + (f" (runtime event {rs})" if rs is not None else "")
        act = f"{e.action}({_args_text(e.args)})" if e.action else "the initial state"
        out.append(f"First violating step: {at}, by {act}")
        if e.kind == "deadlock":
            out.append("  no action of the spec is enabled in this state (deadlock)")
    if e.ranks is not None:
        out.extend(ranks_text(e.ranks))
    f = e.finding
    if f is not None:
        out.append(f"Failing conjunct at {f.conjunct.location}:")
        for line in f.conjunct.text.splitlines():
            out.append(f"    {line}")
        if f.bindings:
            out.append("  with " + ", ".join(f"{n} = {v}" for n, v in f.bindings.items()))
        if f.top.location != f.conjunct.location:
            out.append(f"  (in the definition at {f.top.location})")
    if e.diff:
        out.append("State diff of the last steps:")
        for d in e.diff:
            out.append(f"  step {d['step']} {d['action'] or ''}:")
            if not d["changes"]:
                out.append("    (no variable changed)")
            for var, (a, b) in d["changes"].items():
                out.append(f"    {var}: {a} -> {b}")
    if e.trace_is_spec_behavior is not None:
        out.append(f"Trace is a behavior of the spec: {'yes' if e.trace_is_spec_behavior else 'no'}")
        if e.divergence:
            out.append(f"  {e.divergence['reason']}")
        compound = [c for c in e.step_checks if str(c.status) == "compound"]
        if compound:
            out.append(f"  {len(compound)} step(s) matched as several spec steps, e.g. step {compound[0].index}: "
                       f"{' ; '.join(compound[0].actions)}")
    s = e.spec_search
    if s is not None and s.status != "skipped":
        if s.status == "found":
            out.append(f"Spec's shortest path to {s.target}: {s.length} states ({' -> '.join(s.actions) or 'Init'})"
                       f"; the trace has {e.trace_length} states")
        elif s.status == "none":
            out.append(f"Spec never reaches {s.target} ({s.distinct} states, whole state space)")
        else:
            out.append(f"Spec search for {s.target}: {s.status} {s.note}".rstrip())
    out.append(f"Verdict: {e.verdict_text}")
    for n in e.notes:
        out.append(f"Note: {n}")
    return "\n".join(out)


def ranks_text(r: dict) -> list[str]:
    """The cross-rank part of the report: who diverged, at which calls, on which fields."""
    div = ", ".join(f"rank {x}" for x in r["diverging_ranks"]) or "none"
    out = [f"Diverging ranks: {div} (reference: rank {r['reference_rank']}, the largest group that agrees)"]
    out.append("  collective-bearing calls: " + ", ".join(
        f"rank {k} {c}" for k, c in sorted(r["calls"].items(), key=lambda kv: int(kv[0])))
        + ("" if r["same_call"] else "  <- different calls"))
    if r["fields"]:
        out.append(f"Digest fields that differ: {', '.join(r['fields'])}")
        for name in r["fields"]:
            for rank, val in sorted(r["values"].get(name, {}).items(), key=lambda kv: int(kv[0])):
                out.append(f"    {name} @ rank {rank}: {val}")
    return out
