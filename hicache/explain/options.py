"""Options of `hicache explain`, validated once."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


class OptionError(ValueError):
    """An option out of range: `name` is the Options field, so the CLI can name its flag
    (`--max-states`) rather than the dataclass field."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason
        super().__init__(f"{name}: {reason}")


@dataclass(frozen=True, slots=True)
class Options:
    spec: str | None = None
    config: str | None = None
    max_states: int = 200_000        # spec search budget (distinct states)
    max_seconds: float = 60.0        # spec search budget (wall clock)
    compound: int = 3                # spec steps one trace step may stand for
    compound_states: int = 20_000    # states explored per compound match
    diff_steps: int = 3              # transitions shown in the diff

    def __post_init__(self) -> None:
        for name in ("max_states", "compound_states", "diff_steps", "compound"):
            if getattr(self, name) < 1:
                raise OptionError(name, f"must be >= 1, got {getattr(self, name)}")
        # nan compares false with everything (it would disable the budget) and inf is no budget
        if not math.isfinite(self.max_seconds) or self.max_seconds <= 0:
            raise OptionError("max_seconds", f"must be a finite number > 0, got {self.max_seconds}")
        # a spec or config named by the user must exist (the trace's own are looked up, and
        # their absence noted, by the analysis)
        for name in ("spec", "config"):
            given = getattr(self, name)
            if given is not None and not Path(given).is_file():
                raise OptionError(name, f"{given}: no such file")
