"""Per-layer restore -> gather -> attention with two scratch slots, as a guard state machine.

One rank's view of spec/LayerPipeline.tla. The gather adapter calls these actions in the
order it performs them; an illegal order raises at once (the adapter has a bug, fail loudly).
The cross-rank part (the gather of layer l starts only after every rank restored l) is what
this rank learned from the other ranks: in the distributed gather each rank's part of the
collective carries how many layers it had restored when it sent (`peer_restore_layer`), and
the gather writes its slot (GatherStart) only after the collective delivered every part.
`late_ranks` is the verdict on those parts that every rank reaches alike, its own part included.
Slot of layer l = l mod 2.
Pure: no torch, no I/O; not thread-safe (the adapter serialises calls under its lock).
"""
from __future__ import annotations

from dataclasses import dataclass, field

SLOTS = 2


class IllegalTransition(RuntimeError):
    """An action ran in a state where the protocol forbids it."""


def slot_of(layer: int) -> int:
    return layer % SLOTS


def late_ranks(counts, layer: int) -> list[int]:
    """The ranks whose part of layer `layer`'s collective says they had not restored `layer`
    (`counts[r]`: the layers rank r had restored when it sent, from its header), ascending.
    Every rank evaluates it on the same headers, its own included, so all ranks reach the
    same verdict on a layer and fail at the same collective (none waits in the next one)."""
    if type(layer) is not int or layer < 0:
        raise ValueError(f"layer: must be an integer >= 0, got {layer!r}")
    return [r for r, k in enumerate(counts) if k <= layer]


def _start_in_order(action: str, layer: int, running: set[int], done: set[int], busy: str) -> None:
    """What GatherStart and AttentionStart share: a layer starts once, one at a time, and in
    layer order (`running` | `done` stays the prefix 0..len(done))."""
    if layer in running or layer in done:
        raise IllegalTransition(f"{action}({layer}) twice")
    if running:
        raise IllegalTransition(f"{action}({layer}) while {busy.format(min(running))}")
    if layer != len(done):
        raise IllegalTransition(f"{action}({layer}) before {action}({len(done)})")


@dataclass(slots=True)
class LayerPipelineGuard:
    """One rank's side of spec/LayerPipeline.tla's actions. Invariants (the spec's guards):
    restores, gathers and attentions each run in layer order; gather(l) starts only after
    restore(l), with no other gather in progress, and into slot l%2 only after attention(l-2)
    finished (slot free); attention(l) starts only after gather(l) finished, with no other
    attention running, while slot l%2 still holds layer l. So the sets below stay prefixes:
    restored = 0..k-1, gathering | gathered = 0..g-1, attending | attended = 0..a-1.
    `peers`, given, names the other ranks: gather(l) then also starts only after each of them
    is known to have restored l. Left empty, the caller supplies that part (the bug zoo moves
    every rank's guard in one process)."""
    num_layers: int
    restored: set[int] = field(default_factory=set)
    gathering: set[int] = field(default_factory=set)
    gathered: set[int] = field(default_factory=set)
    attending: set[int] = field(default_factory=set)
    attended: set[int] = field(default_factory=set)
    # Invariant: peers[r] in 0..num_layers; rank r restored layers 0..peers[r]-1, as this rank
    # learned it (a lower bound of what r restored: it only grows).
    peers: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.num_layers) is not int or self.num_layers < 1:
            raise ValueError(f"num_layers: must be an integer >= 1, got {self.num_layers!r}")

    def _layer(self, layer: int) -> None:
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer {layer} outside [0, {self.num_layers})")

    def rank_restore_layer(self, layer: int) -> None:
        self._layer(layer)
        if layer in self.restored:
            raise IllegalTransition(f"RankRestoreLayer({layer}) twice")
        if layer != len(self.restored):
            raise IllegalTransition(f"RankRestoreLayer({layer}) before RankRestoreLayer({len(self.restored)})")
        self.restored.add(layer)

    def peer_restore_layer(self, rank: int, layer: int) -> None:
        """This rank learned that peer `rank` restored `layer` (the peer's restores, in order)."""
        self._layer(layer)
        if rank not in self.peers:
            raise ValueError(f"rank {rank} is not a peer of this guard (peers {sorted(self.peers)})")
        if layer != self.peers[rank]:
            raise IllegalTransition(f"RankRestoreLayer({rank}, {layer}) learned, but rank {rank} was known to "
                                    f"have restored {self.peers[rank]} layers")
        self.peers[rank] = layer + 1

    def gather_start(self, layer: int) -> None:
        self._layer(layer)
        if layer not in self.restored:
            raise IllegalTransition(f"GatherStart({layer}) before RankRestoreLayer({layer})")
        late = sorted(r for r, k in self.peers.items() if k <= layer)
        if late:
            raise IllegalTransition(f"GatherStart({layer}) before rank {late[0]} restored layer {layer} "
                                    f"(RankRestoreLayer({late[0]}, {layer}) not known here)")
        _start_in_order("GatherStart", layer, self.gathering, self.gathered,
                        "the gather of layer {} is in progress (one gather at a time)")
        prev = layer - SLOTS
        if prev >= 0 and prev not in self.attended:
            raise IllegalTransition(
                f"GatherStart({layer}) overwrites slot {slot_of(layer)} while layer {prev} may still be read")
        self.gathering.add(layer)

    def gather_finish(self, layer: int) -> None:
        if layer not in self.gathering:
            raise IllegalTransition(f"GatherFinish({layer}) without GatherStart")
        self.gathering.discard(layer)
        self.gathered.add(layer)

    def attention_start(self, layer: int) -> None:
        self._layer(layer)
        if layer not in self.gathered:
            raise IllegalTransition(f"AttentionStart({layer}) before GatherFinish({layer})")
        _start_in_order("AttentionStart", layer, self.attending, self.attended, "attention on layer {} is running")
        later = layer + SLOTS
        if later in self.gathering or later in self.gathered:
            # (unreachable through this guard's own gather_start, which waits for this
            # attention to finish; a guard subclass or a direct set edit can get here)
            raise IllegalTransition(f"AttentionStart({layer}) reads slot {slot_of(layer)}, which now holds "
                                    f"layer {later}")
        self.attending.add(layer)

    def attention_finish(self, layer: int) -> None:
        if layer not in self.attending:
            raise IllegalTransition(f"AttentionFinish({layer}) without AttentionStart")
        self.attending.discard(layer)
        self.attended.add(layer)
