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
