"""`hicache explain`: the invariant-violation debugger (text, JSON and one HTML page)."""
from hicache.explain.analysis import Explanation, Options, StepStatus, Verdict, explain

__all__ = ["Explanation", "Options", "StepStatus", "Verdict", "explain"]
