"""pp_sync adapter: stage 0 MIN-reduces its counts over its CP group and sends them down.

Stage s > 0 receives the agreed vector from (s-1, same cp rank), checks that the upstream
stage is at the same step with the same state digest, and forwards it to (s+1). The caller
then pops exactly `outcome.counts` from its queues (StageApply), waiting for each transfer.
LeaderAgree (stage 0) and StageForward (s > 0) carry `counts` (what the stage applies) and
`forwarded` (the counts of the vector it sent to s+1; None on the last stage).
Runs unconditionally on every rank at every cache check.
"""
from __future__ import annotations

import threading

import torch

from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.pp_sync import HEADER, SyncLayout, SyncOutcome
from hicache.protocol.vocabulary import PPSync

from .comm import Comm
from .errors import DivergenceError

STEP = "pp_sync"


def pp_sync(comm: Comm, digest: int, counts: list[int], votes: list[int],
            listener: Listener = NULL_LISTENER) -> SyncOutcome:
    topo = comm.topo
    layout = SyncLayout(len(counts), len(votes))
    if topo.stage == 0:
        label, code, raw, out = comm.min_reduce(STEP, comm.cp_group, digest, counts, votes)
        # Forward the raw vector first, disagreement included, so later stages fail with the
        # same diagnosis instead of a closed connection.
        sent = _forwarding(comm, label, raw)
        comm.raise_unless_agreed(label, comm.cp_group, out, code, digest)
        listener(PPSync.LeaderAgree, {"rank": topo.rank, "counts": out.counts, "votes": out.votes,
                                      "forwarded": _counts(layout, sent)})
        return out
    label, code = comm.next_step(STEP)
    raw = torch.zeros(layout.width, dtype=torch.int64)
    comm.recv_vec(label, raw, src=topo.prev_rank)
    out = layout.decode(raw.tolist())
    problem = None
    if not (out.step_agreed and out.digest_agreed):
        problem = f"an upstream stage found its ranks disagreeing on the {'step' if not out.step_agreed else 'state digest'}"
    elif out.step != code:
        problem = f"upstream rank {topo.prev_rank} is at another pp_sync step"
    elif out.digest != digest:
        problem = (f"state digest differs from upstream rank {topo.prev_rank} "
                   f"({out.digest & 0xffff:04x} vs {digest & 0xffff:04x})")
    if problem is not None:
        raw[3] = -(raw[2] + 1)          # poison the pair: downstream stages fail too
    sent = _forwarding(comm, label, raw)
    if problem is not None:
        raise DivergenceError(label, topo.rank, problem)
    listener(PPSync.StageForward, {"rank": topo.rank, "stage": topo.stage, "counts": out.counts,
                                   "forwarded": _counts(layout, sent)})
    return out


def _forwarding(comm: Comm, label: str, raw: torch.Tensor) -> torch.Tensor | None:
    """`_forward`, and the vector it actually sent (None when it sent nothing: the last
    stage). Recorded at the send itself, so the report is what went down the wire."""
    _sent.vec = None
    _forward(comm, label, raw)
    sent, _sent.vec = _sent.vec, None
    return sent


def _forward(comm: Comm, label: str, raw: torch.Tensor) -> None:
    if comm.topo.next_rank is not None:
        comm.send_vec(label + ":forward", raw, dst=comm.topo.next_rank)
        _sent.vec = raw     # (the send has completed: what went down the wire, unchanged after)


#: per thread (a rank's pp_sync runs on one thread): the vector its last forward sent
_sent = threading.local()


def _counts(layout: SyncLayout, sent: torch.Tensor | None) -> tuple[int, ...] | None:
    """The counts of the vector a stage sent downstream (the events' `forwarded`: what the
    next stage will apply, which the PPSync monitor compares with what this stage applies)."""
    return None if sent is None else tuple(sent[HEADER:HEADER + layout.n_counts].tolist())
