"""Located errors of the TLA+ toolkit. Every user-facing error names file:line:col."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Loc:
    """A source location; line and col are 1-based as TLC prints them."""
    file: str
    line: int
    col: int
    end_line: int = 0
    end_col: int = 0

    def __str__(self) -> str:
        # line 0: the file as a whole (missing, unreadable), no position in it to name
        if self.line <= 0:
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


class TlaError(Exception):
    """Base error: a one-line message with a location when one is known."""
    kind = "error"

    def __init__(self, message: str, loc: Loc | None = None, state: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.state = state

    def __str__(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        text = f"{where}{self.kind}: {self.message}"
        if self.state:
            text += f"\n  while evaluating in state:\n{self.state}"
        return text


class ParseError(TlaError):
    kind = "parse error"


class SemanticError(TlaError):
    """Unknown identifier, arity mismatch, missing constant, bad config."""
    kind = "semantic error"


class EvalError(TlaError):
    """Evaluation failed: operator outside its domain, type error, CHOOSE without witness."""
    kind = "evaluation error"


class ConfigError(TlaError):
    kind = "config error"
