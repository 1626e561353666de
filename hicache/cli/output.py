"""Shared output helper: human text, or one JSON object as the last stdout line."""
from __future__ import annotations

import argparse
import json
import sys


def emit(args: argparse.Namespace, obj: dict, text: str | None) -> None:
    """Print `text` for humans; with --json, print `obj` as one line, last."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(obj, default=str) + "\n")
    elif text is not None:
        sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def refuse(args: argparse.Namespace, prog: str, error: str, code: int, obj: dict | None = None) -> int:
    """A refused command line: `prog: error` on stderr and, with --json, one JSON object as
    the last stdout line (`obj` with the error added, or {"result": "error", "error": ...}): the
    contract every subcommand keeps. Returns `code`."""
    print(f"{prog}: {error}", file=sys.stderr)
    if getattr(args, "json", False):
        emit(args, {**(obj if obj is not None else {"result": "error"}), "error": error}, None)
    return code

