"""Options of `hicache explain`, validated once."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
        for name in ("max_states", "compound_states", "diff_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: {getattr(self, name)} < 1")
        if self.compound < 1:
            raise ValueError(f"compound: {self.compound} < 1")
        if self.max_seconds <= 0:
            raise ValueError(f"max_seconds: {self.max_seconds} <= 0")
        # a spec or config named by the user must exist (the trace's own are looked up, and
        # their absence noted, by the analysis)
        for name in ("spec", "config"):
            given = getattr(self, name)
            if given is not None and not Path(given).is_file():
                raise ValueError(f"{name}: {given}: no such file")
