---------------------------- MODULE LayerPipeline ----------------------------
(***************************************************************************)
(* Per-layer restore -> gather -> attention with two scratch slots.        *)
(*                                                                         *)
(* Under context parallelism every rank holds only its own pages of a      *)
(* cached prefix.  Before attention on layer l reads the prefix, the ranks *)
(* all-gather layer l into scratch slot l % 2.  Each rank restores layers  *)
(* from host in order and marks each one done; the gather of layer l waits *)
(* until every rank restored l; attention on l waits until slot l % 2      *)
(* holds the gathered layer l, and while it computes, the gather of layer  *)
(* l+1 fills the other slot.  Only two slots exist, so the gather of l+2   *)
(* may start only once attention on l released slot l % 2.  One gather    *)
(* stream: gathers run one at a time, in layer order.                      *)
(*                                                                         *)
(*   rank r:  restore 0 | restore 1 | restore 2 | ...                      *)
(*   gather:        G0->slot0 | G1->slot1 | G2->slot0 (after A0 done)      *)
(*   attention:               |    A0     |    A1     |  A2 ...            *)
(*                                                                         *)
(* Bug twins: BugSkipRestoreWait = TRUE gathers before every rank restored *)
(* the layer (GatherAfterRestore fails); BugSkipSlotWait = TRUE gathers    *)
(* into a slot attention still reads (NoOverwriteWhileRead fails).         *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NRanks,              \* context-parallel ranks
    NLayers,             \* layers of the cached prefix
    BugSkipRestoreWait,  \* seeded bug: gather does not wait for the restore
    BugSkipSlotWait      \* seeded bug: gather does not wait for the slot's reader

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(NRanks) /\ Positive(NLayers)
ASSUME BugSkipRestoreWait \in BOOLEAN /\ BugSkipSlotWait \in BOOLEAN

Ranks  == 0..(NRanks - 1)
Layers == 0..(NLayers - 1)
Slots  == {0, 1}               \* two buffers only
None   == -1

Slot(l) == l % 2               \* the slot layer l is gathered into

VARIABLES
    restored,    \* restored[r]: layers 0..restored[r]-1 are restored on rank r
    slotLayer,   \* slotLayer[s]: layer whose rows slot s holds or receives, or None
    slotFull,    \* slotFull[s]: the gather into slot s completed
    gatherBusy,  \* gatherBusy[s]: a gather is writing slot s now
    gatherNext,  \* next layer to gather (gathers run in layer order)
    attnNext,    \* next layer attention runs on
    reading      \* layer attention is reading now, or None

vars == <<restored, slotLayer, slotFull, gatherBusy, gatherNext, attnNext, reading>>

TypeOK ==
    /\ restored \in [Ranks -> 0..NLayers]
    /\ slotLayer \in [Slots -> Layers \cup {None}]
    /\ slotFull \in [Slots -> BOOLEAN]
    /\ gatherBusy \in [Slots -> BOOLEAN]
    /\ gatherNext \in 0..NLayers
    /\ attnNext \in 0..NLayers
    /\ reading \in Layers \cup {None}

Init ==
    /\ restored = [r \in Ranks |-> 0]
    /\ slotLayer = [s \in Slots |-> None]
    /\ slotFull = [s \in Slots |-> FALSE]
    /\ gatherBusy = [s \in Slots |-> FALSE]
    /\ gatherNext = 0
    /\ attnNext = 0
    /\ reading = None

(* Rank r finished restoring layer l (its per-layer load event).           *)
RankRestoreLayer(r, l) ==
    /\ l = restored[r]
    /\ l < NLayers
    /\ restored' = [restored EXCEPT ![r] = l + 1]
    /\ UNCHANGED <<slotLayer, slotFull, gatherBusy, gatherNext, attnNext, reading>>

(* Slot s may be overwritten: no reader now and its layer already consumed.*)
SlotReleased(s) ==
    /\ reading # slotLayer[s] \/ slotLayer[s] = None
    /\ slotLayer[s] = None \/ slotLayer[s] < attnNext

(* The gather of layer l into slot l % 2 begins.                           *)
GatherStart(l) ==
    /\ l = gatherNext
    /\ l < NLayers
    /\ \A s \in Slots : ~gatherBusy[s]
    /\ BugSkipRestoreWait \/ \A r \in Ranks : restored[r] > l
    /\ BugSkipSlotWait \/ SlotReleased(Slot(l))
    /\ slotLayer' = [slotLayer EXCEPT ![Slot(l)] = l]
    /\ slotFull' = [slotFull EXCEPT ![Slot(l)] = FALSE]
    /\ gatherBusy' = [gatherBusy EXCEPT ![Slot(l)] = TRUE]
    /\ gatherNext' = l + 1
    /\ UNCHANGED <<restored, attnNext, reading>>

(* Slot l % 2 holds layer l gathered from every rank.                      *)
GatherFinish(l) ==
    /\ gatherBusy[Slot(l)]
    /\ slotLayer[Slot(l)] = l
    /\ slotFull' = [slotFull EXCEPT ![Slot(l)] = TRUE]
    /\ gatherBusy' = [gatherBusy EXCEPT ![Slot(l)] = FALSE]
    /\ UNCHANGED <<restored, slotLayer, gatherNext, attnNext, reading>>

(* Attention reads layer l from its slot once the gather completed.        *)
AttentionStart(l) ==
    /\ l = attnNext
    /\ l < NLayers
    /\ reading = None
    /\ slotLayer[Slot(l)] = l
    /\ slotFull[Slot(l)]
    /\ reading' = l
    /\ UNCHANGED <<restored, slotLayer, slotFull, gatherBusy, gatherNext, attnNext>>

(* Attention on layer l is done; its slot may be reused.                   *)
AttentionFinish(l) ==
    /\ reading = l
    /\ reading' = None
    /\ attnNext' = l + 1
    /\ UNCHANGED <<restored, slotLayer, slotFull, gatherBusy, gatherNext>>

(* Every layer went through attention: the forward pass is over.          *)
Finished == attnNext = NLayers
Terminated == Finished /\ UNCHANGED vars

Next ==
    \/ \E r \in Ranks, l \in Layers : RankRestoreLayer(r, l)
    \/ \E l \in Layers :
        \/ GatherStart(l) \/ GatherFinish(l)
        \/ AttentionStart(l) \/ AttentionFinish(l)
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

(* The gather of layer l starts only after every rank restored l.          *)
GatherAfterRestore ==
    \A s \in Slots : slotLayer[s] # None => \A r \in Ranks : restored[r] > slotLayer[s]

(* Attention reads layer l only from its slot after gather l completed.    *)
AttentionReadsGathered ==
    reading # None =>
        /\ slotLayer[Slot(reading)] = reading
        /\ slotFull[Slot(reading)]
        /\ ~gatherBusy[Slot(reading)]

(* No gather overwrites a slot still being read (or not yet read).         *)
NoOverwriteWhileRead ==
    \A s \in Slots :
        gatherBusy[s] =>
            /\ reading = None \/ Slot(reading) # s
            /\ attnNext >= slotLayer[s] - 1

(* Two buffers only: at most two gathered layers are live, l and l+1.      *)
TwoBuffersOnly ==
    /\ gatherNext <= attnNext + 2
    /\ \A s \in Slots : slotLayer[s] # None => Slot(slotLayer[s]) = s

(* Liveness is checked as deadlock-freedom: every state other than         *)
(* Finished has a successor, so the forward pass reaches the last layer.   *)

-----------------------------------------------------------------------------
(* Obligations for all sizes (discharged by Z3, `hicache prove`).          *)

THEOREM GatherNextAvoidsReadSlot ==
    \A l \in Nat : Slot(l + 1) # Slot(l)

THEOREM SlotReusedEveryOtherLayer ==
    \A l \in Nat : Slot(l + 2) = Slot(l)
=============================================================================
