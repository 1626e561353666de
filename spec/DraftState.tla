----------------------------- MODULE DraftState -----------------------------
(***************************************************************************)
(* Speculative decoding: restoring the draft's dependent state together    *)
(* with the target prefix.                                                 *)
(*                                                                         *)
(* A host or storage hit restores the target model's KV and every pool the *)
(* draft model depends on: its own KV, its indexer buffers and its         *)
(* separately owned recurrent state.  Each dependent pool uses one of two  *)
(* layouts.  PACKED: the pool's rows are tail layers of the target host    *)
(* pool and share its slot mapping; allowed only when row shape, dtype and *)
(* token indexing match the target's; their copies ride in the target's   *)
(* per-layer copies and finish before the target's last layer.  SIDECAR:  *)
(* a separate host pool whose transfer indices derive from a declared      *)
(* source pool (the target KV or the SWA pool), copied alongside in the    *)
(* same load-back.  Each pool's row and source are constants: the CI model *)
(* fixes them, a refinement map takes them from the runtime's configured   *)
(* pools.  Either way the transfer's completion event covers the           *)
(* target and every dependent copy, and a consumer reads a pool's buffer   *)
(* only after the completion event.                                        *)
(*                                                                         *)
(*  TransferLaunch(t) --> TargetCopyFinish(t)  --+                         *)
(*                    --> DraftCopyFinish(t,p) --+--> CompletionFire(t)    *)
(*                                                      --> BufferRead(t,p)*)
(*                                                      --> TransferRetire *)
(*                    --> TransferAbort(t)   (a copy failed: never fires)  *)
(*                                                                         *)
(* Transfers are the runtime's completion slots: a fired transfer no       *)
(* consumer can read any more (its requests ended) is retired, and its     *)
(* slot is idle again for a later launch.  A long run thus needs only as   *)
(* many slots as transfers are live at once.  A transfer one of whose      *)
(* copies failed never fires: it is aborted, its consumers get the copy's  *)
(* error instead of its buffers, and its slot is idle again too.           *)
(*                                                                         *)
(* Bug twins: BugFireOnTargetOnly = TRUE fires the completion event when   *)
(* the target copy alone finished (the reference system's bug 13 class):   *)
(* CompletionAfterAllCopies fails.  BugPackIncompatible = TRUE packs a     *)
(* pool whose rows do not match: PackedOnlyCompatible fails.               *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NTransfers,           \* transfer (completion) slots in this model
    NIdx,                 \* abstract index sets a source pool may hand out
    TargetLayers,         \* layers of the target host pool (packed offsets)
    DraftLayers,          \* draft layers appended to it when packed
    HostSlots,            \* host slots (packed offsets)
    TargetRow,            \* row signature of the target pool (dtype, KV planes, width, indexing)
    DraftKVRow,           \* row signature of the draft KV pool
    DraftIndexerRow,      \* row signature of the draft indexer pool
    DraftStateRow,        \* row signature of the draft recurrent-state pool
    DraftKVSource,        \* source ("kv" or "swa") of the draft KV pool's sidecar indices
    DraftIndexerSource,   \* source of the draft indexer pool's sidecar indices
    DraftStateSource,     \* source of the draft state pool's sidecar indices
    BugFireOnTargetOnly,  \* seeded bug: completion ignores the draft copies
    BugPackIncompatible   \* seeded bug: packed layout for an incompatible pool

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

Transfers  == 1..NTransfers
Idx        == 1..NIdx
DraftPools == {"draft_kv", "draft_indexer", "draft_state"}
AllPools   == {"target"} \cup DraftPools
Sources    == {"kv", "swa"}

ASSUME Positive(NTransfers) /\ Positive(NIdx)
ASSUME Positive(TargetLayers) /\ Positive(DraftLayers) /\ Positive(HostSlots)
ASSUME {TargetRow, DraftKVRow, DraftIndexerRow, DraftStateRow} \subseteq STRING
ASSUME {DraftKVSource, DraftIndexerSource, DraftStateSource} \subseteq Sources
ASSUME BugFireOnTargetOnly \in BOOLEAN /\ BugPackIncompatible \in BOOLEAN

(* Row signature of each dependent pool: its element type, row width, KV   *)
(* planes and how rows are indexed, as one string; two pools may share a   *)
(* slot mapping only if their signatures are equal.  Constants, so that    *)
(* one spec covers every pool geometry a runtime may configure.            *)
Row(p) ==
    CASE p = "draft_kv"      -> DraftKVRow
      [] p = "draft_indexer" -> DraftIndexerRow
      [] p = "draft_state"   -> DraftStateRow

(* The source pool a sidecar pool derives its transfer indices from.       *)
SourceOf(p) ==
    CASE p = "draft_kv"      -> DraftKVSource
      [] p = "draft_indexer" -> DraftIndexerSource
      [] p = "draft_state"   -> DraftStateSource

Compatible(p) == Row(p) = TargetRow

AllowedLayouts(p) ==
    IF Compatible(p) \/ BugPackIncompatible THEN {"packed", "sidecar"} ELSE {"sidecar"}

(* Packed host layout (page_first): row of (slot, layer), target layers    *)
(* first, then the draft layers.                                           *)
PackedOffset(s, l, lt, ld) == s * (lt + ld) + l

VARIABLES
    layout,     \* layout[p]: "packed" or "sidecar", fixed at start
    phase,      \* phase[t]: "idle", "copying", "fired" (completion event fired)
    tgtDone,    \* tgtDone[t]: the target KV copy of t finished
    draftDone,  \* draftDone[t]: dependent pools whose copy of t finished
    read,       \* read[t]: pools whose buffer a consumer read for t
    readStale,  \* ghost: pools of t read before their copy finished
    srcIdx,     \* srcIdx[t]: indices the source pools handed out for t, per source
    xferIdx     \* xferIdx[t][p]: indices dependent pool p copies for t

vars == <<layout, phase, tgtDone, draftDone, read, readStale, srcIdx, xferIdx>>

TypeOK ==
    /\ layout \in [DraftPools -> {"packed", "sidecar"}]
    /\ phase \in [Transfers -> {"idle", "copying", "fired"}]
    /\ tgtDone \in [Transfers -> BOOLEAN]
    /\ draftDone \in [Transfers -> SUBSET DraftPools]
    /\ read \in [Transfers -> SUBSET AllPools]
    /\ readStale \in [Transfers -> SUBSET AllPools]
    /\ srcIdx \in [Transfers -> [Sources -> Idx \cup {0}]]
    /\ xferIdx \in [Transfers -> [DraftPools -> Idx \cup {0}]]

Packed  == {p \in DraftPools : layout[p] = "packed"}
Copied(t) == (IF tgtDone[t] THEN {"target"} ELSE {}) \cup draftDone[t]

Init ==
    /\ layout \in {f \in [DraftPools -> {"packed", "sidecar"}] :
                      \A p \in DraftPools : f[p] \in AllowedLayouts(p)}
    /\ phase = [t \in Transfers |-> "idle"]
    /\ tgtDone = [t \in Transfers |-> FALSE]
    /\ draftDone = [t \in Transfers |-> {}]
    /\ read = [t \in Transfers |-> {}]
    /\ readStale = [t \in Transfers |-> {}]
    /\ srcIdx = [t \in Transfers |-> [s \in Sources |-> 0]]
    /\ xferIdx = [t \in Transfers |-> [p \in DraftPools |-> 0]]

(* The indices pool p copies: the target's slot mapping when packed, its   *)
(* declared source's indices when sidecar.                                 *)
IdxFor(p, src) == IF layout[p] = "packed" THEN src["kv"] ELSE src[SourceOf(p)]

(* A load-back of the target and every dependent pool is launched.         *)
TransferLaunch(t) ==
    /\ phase[t] = "idle"
    /\ \E kv \in Idx, swa \in Idx :
        LET src == [s \in Sources |-> IF s = "kv" THEN kv ELSE swa]
        IN  /\ srcIdx' = [srcIdx EXCEPT ![t] = src]
            /\ xferIdx' = [xferIdx EXCEPT ![t] = [p \in DraftPools |-> IdxFor(p, src)]]
    /\ phase' = [phase EXCEPT ![t] = "copying"]
    /\ UNCHANGED <<layout, tgtDone, draftDone, read, readStale>>

(* The target KV copy of t finished; packed rows ride in the target's      *)
(* per-layer copies, so they finished before its last layer.               *)
TargetCopyFinish(t) ==
    /\ phase[t] = "copying"
    /\ ~tgtDone[t]
    /\ Packed \subseteq draftDone[t]
    /\ tgtDone' = [tgtDone EXCEPT ![t] = TRUE]
    /\ UNCHANGED <<layout, phase, draftDone, read, readStale, srcIdx, xferIdx>>

(* Dependent pool p's copy of t finished.                                  *)
DraftCopyFinish(t, p) ==
    /\ phase[t] = "copying"
    /\ p \notin draftDone[t]
    /\ draftDone' = [draftDone EXCEPT ![t] = @ \cup {p}]
    /\ UNCHANGED <<layout, phase, tgtDone, read, readStale, srcIdx, xferIdx>>

(* The completion event of t fires once every copy finished (the bug:     *)
(* once the target copy finished).                                         *)
CompletionFire(t) ==
    /\ phase[t] = "copying"
    /\ tgtDone[t]
    /\ BugFireOnTargetOnly \/ draftDone[t] = DraftPools
    /\ phase' = [phase EXCEPT ![t] = "fired"]
    /\ UNCHANGED <<layout, tgtDone, draftDone, read, readStale, srcIdx, xferIdx>>

(* A consumer waits on t's completion event, then reads pool p's buffer.   *)
BufferRead(t, p) ==
    /\ phase[t] = "fired"
    /\ p \notin read[t]
    /\ read' = [read EXCEPT ![t] = @ \cup {p}]
    /\ readStale' = IF p \in Copied(t) THEN readStale
                    ELSE [readStale EXCEPT ![t] = @ \cup {p}]
    /\ UNCHANGED <<layout, phase, tgtDone, draftDone, srcIdx, xferIdx>>

(* A late copy of a fired transfer (only reachable with the bug).          *)
LateDraftCopy(t, p) ==
    /\ phase[t] = "fired"
    /\ p \notin draftDone[t]
    /\ draftDone' = [draftDone EXCEPT ![t] = @ \cup {p}]
    /\ UNCHANGED <<layout, phase, tgtDone, read, readStale, srcIdx, xferIdx>>

(* A fired transfer that no consumer can read any more gives its slot back: *)
(* the slot is idle again, as at Init.  (A read after this would need      *)
(* phase[t] = "fired": a read of a released completion fails BufferRead.)  *)
TransferRetire(t) ==
    /\ phase[t] = "fired"
    /\ phase' = [phase EXCEPT ![t] = "idle"]
    /\ tgtDone' = [tgtDone EXCEPT ![t] = FALSE]
    /\ draftDone' = [draftDone EXCEPT ![t] = {}]
    /\ read' = [read EXCEPT ![t] = {}]
    /\ readStale' = [readStale EXCEPT ![t] = {}]
    /\ srcIdx' = [srcIdx EXCEPT ![t] = [s \in Sources |-> 0]]
    /\ xferIdx' = [xferIdx EXCEPT ![t] = [p \in DraftPools |-> 0]]
    /\ UNCHANGED layout

(* A copying transfer one of whose copies failed is aborted: it never      *)
(* fires, so no consumer reads it (BufferRead needs phase[t] = "fired"),   *)
(* and its slot is idle again, as at Init.                                 *)
TransferAbort(t) ==
    /\ phase[t] = "copying"
    /\ phase' = [phase EXCEPT ![t] = "idle"]
    /\ tgtDone' = [tgtDone EXCEPT ![t] = FALSE]
    /\ draftDone' = [draftDone EXCEPT ![t] = {}]
    /\ srcIdx' = [srcIdx EXCEPT ![t] = [s \in Sources |-> 0]]
    /\ xferIdx' = [xferIdx EXCEPT ![t] = [p \in DraftPools |-> 0]]
    /\ UNCHANGED <<layout, read, readStale>>

Finished == \A t \in Transfers : phase[t] = "fired" /\ read[t] = AllPools
Terminated == Finished /\ UNCHANGED vars

Next ==
    \/ \E t \in Transfers :
        \/ TransferLaunch(t) \/ TargetCopyFinish(t) \/ CompletionFire(t)
        \/ TransferRetire(t) \/ TransferAbort(t)
        \/ \E p \in DraftPools : DraftCopyFinish(t, p) \/ LateDraftCopy(t, p)
        \/ \E p \in AllPools : BufferRead(t, p)
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

(* A completion event fires only after the target KV and every draft-state *)
(* copy finished.                                                          *)
CompletionAfterAllCopies ==
    \A t \in Transfers : phase[t] = "fired" => tgtDone[t] /\ draftDone[t] = DraftPools

(* No buffer is read before its completion event, nor before its copy.     *)
NoReadBeforeCompletion ==
    \A t \in Transfers :
        /\ read[t] # {} => phase[t] = "fired"
        /\ readStale[t] = {}

(* The packed layout only for pools whose rows match the target's.         *)
PackedOnlyCompatible ==
    \A p \in DraftPools : layout[p] = "packed" => Compatible(p)

(* Packed pools share the target's slot mapping; sidecar pools copy the    *)
(* indices of their declared source.                                       *)
IndicesFromDeclaredSource ==
    \A t \in Transfers : phase[t] # "idle" =>
        \A p \in DraftPools :
            xferIdx[t][p] = IF layout[p] = "packed" THEN srcIdx[t]["kv"]
                            ELSE srcIdx[t][SourceOf(p)]

(* Packed host offsets of target rows and draft rows never overlap.        *)
PackedOffsetsDisjoint ==
    \A s1, s2 \in 0..(HostSlots - 1) :
        \A lt \in 0..(TargetLayers - 1), ld \in 0..(DraftLayers - 1) :
            PackedOffset(s1, lt, TargetLayers, DraftLayers)
                # PackedOffset(s2, TargetLayers + ld, TargetLayers, DraftLayers)

-----------------------------------------------------------------------------
(* Obligations for all sizes (discharged by Z3, `hicache prove`).          *)

THEOREM PackedTargetDraftRowsDisjoint ==
    \A s1, s2, lt, ld, nt, nd \in Nat :
        (nt >= 1 /\ nd >= 1 /\ lt < nt /\ ld < nd) =>
            PackedOffset(s1, lt, nt, nd) # PackedOffset(s2, nt + ld, nt, nd)

THEOREM PackedRowsInjective ==
    \A s1, s2, l1, l2, nt, nd \in Nat :
        (nt >= 1 /\ nd >= 0 /\ l1 < nt + nd /\ l2 < nt + nd
            /\ PackedOffset(s1, l1, nt, nd) = PackedOffset(s2, l2, nt, nd)) =>
            s1 = s2 /\ l1 = l2
=============================================================================
