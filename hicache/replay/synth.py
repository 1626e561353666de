"""A synthetic trace of long agentic sessions, in the Mooncake trace format.

The brief's traffic (mean input 136K tokens, some prompts near 1M) is not public. This
generator makes a stand-in of that shape, deterministic from a seed, to run the evaluation at
that scale: sessions start from one of a few shared system prompts plus a task context, then
each turn re-sends the whole context grown by a tool result and a model reply (so each request
extends its session's previous prompt: prefix hits). Context lengths are scaled so that the
mean input is `mean_input_tokens`, and clipped at `max_input_tokens`. Sessions arrive as a
Poisson process and turns are separated by exponential think/tool times; requests are
written in timestamp order, each block id a 512-token block (ids form a radix tree).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np

from hicache.replay.trace import BLOCK_TOKENS


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AgenticTraceConfig:
    requests: int = 2_000
    mean_input_tokens: int = 136_000
    max_input_tokens: int = 900_000
    system_prompts: int = 8
    system_tokens: int = 8_192          # shared prefix of every session (16 blocks)
    mean_turns: float = 24.0            # turns per session (1 + geometric)
    session_rate_per_s: float = 0.1     # new sessions per second
    mean_turn_gap_s: float = 20.0       # tool call + decode between turns
    mean_output_tokens: int = 600
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("requests", "mean_input_tokens", "max_input_tokens", "system_prompts",
                     "system_tokens", "mean_output_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name}: must be a positive int, got {v!r}")
        for name in ("mean_turns", "session_rate_per_s", "mean_turn_gap_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        if self.mean_turns < 1:
            raise ValueError(f"mean_turns: must be >= 1, got {self.mean_turns}")
        if not self.system_tokens < self.mean_input_tokens <= self.max_input_tokens:
            raise ValueError("mean_input_tokens: must lie in (system_tokens, max_input_tokens]")


def _lengths(cfg: AgenticTraceConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Unscaled per-session context lengths (monotone within a session), cfg.requests in all."""
    sessions = []
    n = 0
    while n < cfg.requests:
        turns = min(int(rng.geometric(1.0 / cfg.mean_turns)), cfg.requests - n)
        start = rng.lognormal(0.0, 1.1)                     # task context, relative units
        growth = rng.lognormal(-2.5, 1.4, size=turns)       # tool result + reply per turn
        growth[0] = 0.0
        sessions.append(start + np.cumsum(growth))
        n += turns
    return sessions


def _scale(sessions: list[np.ndarray], cfg: AgenticTraceConfig) -> list[np.ndarray]:
    """Scale relative lengths to tokens: mean (after clipping) = mean_input_tokens."""
    body_mean = cfg.mean_input_tokens - cfg.system_tokens
    body_max = cfg.max_input_tokens - cfg.system_tokens
    flat = np.concatenate(sessions)
    lo, hi = 0.0, body_max / flat.min()
    for _ in range(60):   # bisection: the clipped mean is monotone in the factor
        f = (lo + hi) / 2
        if np.minimum(flat * f, body_max).mean() < body_mean:
            lo = f
        else:
            hi = f
    return [np.maximum(np.minimum(s * lo, body_max), 1.0).astype(np.int64) + cfg.system_tokens
            for s in sessions]


def generate(cfg: AgenticTraceConfig) -> Iterator[dict]:
    """Trace records in timestamp order."""
    rng = np.random.default_rng(cfg.seed)
    sessions = _scale(_lengths(cfg, rng), cfg)
    sys_blocks = -(-cfg.system_tokens // BLOCK_TOKENS)
    next_id = 0
    system = []
    for _ in range(cfg.system_prompts):
        system.append(list(range(next_id, next_id + sys_blocks)))
        next_id += sys_blocks
    events = []   # (timestamp ms, session, turn)
    t = 0.0
    for si, lens in enumerate(sessions):
        t += rng.exponential(1.0 / cfg.session_rate_per_s)
        gaps = np.cumsum(rng.exponential(cfg.mean_turn_gap_s, size=len(lens)))
        gaps -= gaps[0]
        events.extend((int((t + g) * 1000), si, j) for j, g in enumerate(gaps))
    events.sort()
    prompt = [rng.integers(cfg.system_prompts) for _ in sessions]
    blocks: list[list[int]] = [[] for _ in sessions]   # each session's own block ids
    out_mean = cfg.mean_output_tokens
    for ts, si, j in events:
        n = int(sessions[si][j])
        nb = -(-n // BLOCK_TOKENS)
        own = blocks[si]
        while sys_blocks + len(own) < nb:
            own.append(next_id)
            next_id += 1
        ids = system[prompt[si]] + own[:nb - sys_blocks]
        yield {"timestamp": ts, "input_length": n,
               "output_length": int(rng.exponential(out_mean)) + 1, "hash_ids": ids}


def write(cfg: AgenticTraceConfig, path: str) -> dict:
    """Write the trace; returns its shape (requests, block refs, unique blocks, lengths)."""
    refs = total = longest = 0
    unique: set[int] = set()
    with open(path, "w") as f:
        for rec in generate(cfg):
            f.write(json.dumps(rec, separators=(", ", ": ")) + "\n")
            ids = rec["hash_ids"]
            refs += len(ids)
            unique.update(ids)
            total += rec["input_length"]
            longest = max(longest, rec["input_length"])
    return {"requests": cfg.requests, "block_refs": refs, "unique_blocks": len(unique),
            "mean_input_tokens": total / cfg.requests, "max_input_tokens": longest}


def main(argv: list[str] | None = None) -> int:
    """`python -m hicache.replay.synth OUT.jsonl [--requests N] [--seed S]`."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m hicache.replay.synth", description=__doc__.split("\n")[0])
    d = AgenticTraceConfig()
    p.add_argument("out")
    p.add_argument("--requests", type=int, default=d.requests)
    p.add_argument("--mean-input-tokens", type=int, default=d.mean_input_tokens)
    p.add_argument("--max-input-tokens", type=int, default=d.max_input_tokens)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    shape = write(AgenticTraceConfig(requests=a.requests, mean_input_tokens=a.mean_input_tokens,
                                     max_input_tokens=a.max_input_tokens, seed=a.seed), a.out)
    print(json.dumps(shape))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
