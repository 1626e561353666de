"""TLC-style text for results: the behavior of a violation and the closing summary."""
from __future__ import annotations

from hicache.tla.checker import Result
from hicache.tla.values import fmt


def behavior_text(res: Result) -> str:
    lines = []
    for i, step in enumerate(res.trace or [], 1):
        label = "<Initial predicate>" if step.action is None else step.action.label()
        lines.append(f"State {i}: {label}")
        rows = res.shown[i - 1] if res.shown else zip(res.variables, step.state)   # (the ALIAS, as TLC)
        for name, val in rows:
            lines.append(f"/\\ {name} = {fmt(val)}")
        lines.append("")
    return "\n".join(lines)


def summary_text(res: Result) -> str:
    out = []
    for w in res.warnings:
        out.append(f"Warning: {w}")
    if res.result == "invariant":
        out.append(f"Error: Invariant {res.violated} is violated.")
    elif res.result == "property":
        out.append(f"Error: Action property {res.violated} is violated.")
    elif res.result == "postcondition":
        out.append(f"Error: POSTCONDITION {res.violated} is violated (evaluated once, after the search).")
    elif res.result == "deadlock":
        out.append("Error: Deadlock reached.")
    elif res.result == "error":
        out.append(f"Error: {res.error}")
    if res.trace:
        out.append("Error: The behavior up to this point is:")
        out.append(behavior_text(res))
    if res.result == "ok":
        out.append("Model checking completed. No error has been found.")
    out.append(f"{res.generated} states generated, {res.distinct} distinct states found, "
               f"{res.queue_left} states left on queue.")
    out.append(f"The depth of the complete state graph search is {res.depth}.")
    out.append(f"Finished in {res.seconds:.2f}s.")
    return "\n".join(out)
