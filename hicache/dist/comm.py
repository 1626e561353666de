"""Thin adapter over torch.distributed: groups, checked collectives, a watchdog.

Every collective-bearing step goes through `Comm` so that it
- carries the step identity ([step, -step]) and the rank's state digest ([d, -d]) in the
  same MIN-reduced tensor: ranks at different steps, or with different trees, are detected at
  the step where it happens (DivergenceError naming the step and the ranks);
- is bounded: gloo groups are created with a timeout, a failing collective becomes
  PeerFailure naming the step; a watchdog thread ends a rank stuck in one step for longer than
  the bound (a stall that no collective timeout would see).
Decisions (what to put in the vector, what the result means) are in hicache.protocol.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from hicache.protocol.config_agreement import find_mismatch
from hicache.protocol.digest import step_code
from hicache.protocol.pp_sync import SyncLayout, SyncOutcome

from .errors import DivergenceError, PeerFailure
from .launch import report_progress
from .topology import Topology


class Watchdog:
    """Ends the process if one step runs longer than `limit_s` (never hang).

    The main thread marks step entry/exit; a daemon thread checks. Exiting is the only safe
    action for a rank stuck inside a C++ collective; the message names the step and rank.
    """

    def __init__(self, rank: int, limit_s: float) -> None:
        self.rank, self.limit_s = rank, limit_s
        self._lock = threading.Lock()
        self._active: dict[int, tuple[str, float]] = {}   # thread id -> (step, since)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"watchdog-{rank}", daemon=True)
        self._thread.start()

    @contextmanager
    def step(self, name: str):
        tid = threading.get_ident()
        with self._lock:
            self._active[tid] = (name, time.monotonic())
        try:
            yield
        finally:
            with self._lock:
                self._active.pop(tid, None)

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                stuck = [(n, now - t) for n, t in self._active.values() if now - t > self.limit_s]
            if stuck:
                name, age = stuck[0]
                sys.stderr.write(f"watchdog: rank {self.rank} stuck in step {name!r} for {age:.1f}s; exiting\n")
                sys.stderr.flush()
                os._exit(70)

    def close(self) -> None:
        self._stop.set()


class Comm:
    """One rank's groups and checked collectives."""

    def __init__(self, rank: int, world: int, port: int, timeout_s: float) -> None:
        """Join the world. Groups come later (`build_groups`), once the ranks agreed on the
        configuration: a rank with another CP/PP size would otherwise create other groups and
        hang the rest instead of failing with a clear error."""
        self.rank, self.world = rank, world
        self.topo: Topology | None = None
        self.timeout = timedelta(seconds=timeout_s)
        self.watchdog = Watchdog(rank, limit_s=timeout_s * 1.5 + 5)
        self._seq: dict[str, int] = {}
        with self.watchdog.step("init_process_group"):
            try:
                dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                        world_size=world, timeout=self.timeout)
            except (RuntimeError, ValueError) as exc:
                # (torch's rendezvous errors carry pages of C++ frames: the first line says it)
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise PeerFailure("init_process_group", rank, f"rendezvous of {world} ranks failed within "
                                  f"{timeout_s:g} s: {first}") from None

    def build_groups(self, topo: Topology) -> None:
        if topo.world != self.world or topo.rank != self.rank:
            raise ValueError(f"rank {self.rank}: topology cp={topo.cp} x pp={topo.pp} does not fit a world "
                             f"of {self.world} ranks")
        self.topo = topo
        # Every rank creates every group, in the same order (a torch.distributed rule).
        self.cp_groups = [dist.new_group(topo.stage_ranks(s), timeout=self.timeout, backend="gloo")
                          for s in range(topo.pp)]
        self.gather_groups = [dist.new_group(topo.stage_ranks(s), timeout=self.timeout, backend="gloo")
                              for s in range(topo.pp)]
        # Dedicated to the prefetch sync thread: it reduces concurrently with the main thread.
        self.prefetch_group = dist.new_group(list(range(topo.world)), timeout=self.timeout, backend="gloo")

    @property
    def cp_group(self):
        return self.cp_groups[self.topo.stage]

    @property
    def gather_group(self):
        return self.gather_groups[self.topo.stage]

    def next_step(self, name: str) -> tuple[str, int]:
        """The step's label and code; each call of a named step gets the next sequence number."""
        seq = self._seq.get(name, 0)
        self._seq[name] = seq + 1
        return f"{name}#{seq}", step_code(name, seq)

    def run_step(self, label: str, fn):
        """Run one collective of step `label` under the watchdog; failures name the step."""
        with self.watchdog.step(label):
            try:
                out = fn()
            except (RuntimeError, ValueError) as exc:
                if isinstance(exc, (DivergenceError, PeerFailure)):
                    raise
                raise PeerFailure(label, self.rank, f"collective failed (peer died or stalled?): {exc}") from exc
        report_progress()      # the launcher's no-progress deadline starts again
        return out

    # --- checked collectives -----------------------------------------------------------
    def checked_min(self, name: str, group, digest: int, counts: list[int], votes: list[int] = ()) -> SyncOutcome:
        """One MIN all-reduce of [step pair, digest pair, counts, -votes] over `group`;
        DivergenceError (on every rank of the group) unless step and digest agree."""
        label, code, raw, out = self.min_reduce(name, group, digest, counts, votes)
        self.raise_unless_agreed(label, group, out, code, digest)
        return out

    def min_reduce(self, name: str, group, digest: int, counts: list[int], votes: list[int] = ()):
        """The reduction alone: (label, step code, raw reduced vector, decoded outcome)."""
        label, code = self.next_step(name)
        layout = SyncLayout(len(counts), len(votes))
        vec = torch.tensor(layout.encode(code, digest, counts, list(votes)), dtype=torch.int64)
        self.run_step(label, lambda: dist.all_reduce(vec, op=dist.ReduceOp.MIN, group=group))
        return label, code, vec, layout.decode(vec.tolist())

    def raise_unless_agreed(self, label: str, group, out: SyncOutcome, code: int, digest: int) -> None:
        if out.step_agreed and out.digest_agreed:
            return
        # Every rank saw the same reduced vector, so every rank runs this follow-up: it names
        # the ranks that differ.
        mine = torch.tensor([self.rank, code, digest], dtype=torch.int64)
        size = dist.get_world_size(group)
        rows = [torch.zeros(3, dtype=torch.int64) for _ in range(size)]
        self.run_step(label + ":diagnose", lambda: dist.all_gather(rows, mine, group=group))
        what = "step" if not out.step_agreed else "state digest"
        col = 1 if not out.step_agreed else 2
        detail = ", ".join(f"rank {int(r[0])}={int(r[col]) & 0xffff:04x}" for r in rows)
        raise DivergenceError(label, self.rank, f"ranks disagree on the {what}: {detail}")

    def send_vec(self, label: str, vec: torch.Tensor, dst: int) -> None:
        self.run_step(label, lambda: dist.send(vec, dst=dst))

    def recv_vec(self, label: str, vec: torch.Tensor, src: int) -> None:
        self.run_step(label, lambda: dist.recv(vec, src=src))

    def all_gather_world_digest(self, name: str, digest: int) -> list[int]:
        """Verification: every rank's digest (used by --verify after each cache check)."""
        label, _ = self.next_step(name)
        rows = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        mine = torch.tensor([digest], dtype=torch.int64)
        self.run_step(label, lambda: dist.all_gather(rows, mine))
        return [int(r.item()) for r in rows]

    def check_config(self, config: dict[str, object]) -> None:
        """Start-up: all ranks must agree on every field; otherwise a clear error on all ranks."""
        label, _ = self.next_step("config_agreement")
        gathered: list[object] = [None] * self.world
        self.run_step(label, lambda: dist.all_gather_object(gathered, config))
        problem = find_mismatch(gathered)  # type: ignore[arg-type]
        if problem:
            raise DivergenceError(label, self.rank, problem)

    def barrier(self, name: str) -> None:
        label, _ = self.next_step(name)
        self.run_step(label, lambda: dist.barrier())

    def close(self) -> None:
        self.watchdog.close()
        if dist.is_initialized():
            dist.destroy_process_group()
