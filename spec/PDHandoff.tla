------------------------------ MODULE PDHandoff ------------------------------
(***************************************************************************)
(* Prefill-decode handoff of a cached prefix.                              *)
(*                                                                         *)
(* A prefill engine whose request hits a prefix of NPages pages on its     *)
(* device, host or storage tier hands the prefix's KV to a decode engine.  *)
(* Prefill loads each page back to device first (storage -> host ->        *)
(* device); decode allocates a destination page for each page before the   *)
(* page may be sent; a send is in flight until the page lands on decode;   *)
(* decode reads only pages that landed.  Either side may abort at any      *)
(* time.  An abort cannot cancel a copy already in flight: prefill keeps   *)
(* its source pages locked and decode keeps the destination page until    *)
(* the copy lands, then everything is freed.                               *)
(*                                                                         *)
(*   prefill: LoadBack(i) ... PrefillSend(i) ==== copy ====>               *)
(*   decode:  DecodeAllocate(i) ............ DecodeReceive(i) DecodeRead(i)*)
(*   aborts:  PrefillAbort / DecodeAbort free all but in-flight pages      *)
(*                                                                         *)
(* Bug twins: BugAbortFreesInFlight = TRUE makes a decode abort free the   *)
(* destination of a copy already in flight (the reference system's bug 12, *)
(* use-after-free): InFlightDestOwned fails.  BugSendBeforeLoadBack = TRUE *)
(* sends a page before its load-back finished (bug 11, a missing           *)
(* happens-before): SendAfterLoadBack fails.                               *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NPages,                 \* pages of the cached prefix
    NDecodeSlots,           \* free pages of the decode engine's pool
    BugAbortFreesInFlight,  \* seeded bug: abort frees in-flight destinations
    BugSendBeforeLoadBack   \* seeded bug: send does not wait for the load-back

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(NPages) /\ NDecodeSlots \in Nat
ASSUME BugAbortFreesInFlight \in BOOLEAN /\ BugSendBeforeLoadBack \in BOOLEAN

Pages == 1..NPages
Tiers == {"device", "host", "storage"}
TierRank(x) == CASE x = "device" -> 0 [] x = "host" -> 1 [] x = "storage" -> 2

VARIABLES
    ploc,          \* ploc[i]: prefill tier holding page i
    pstate,        \* prefill side: "running", "aborted" or "done"
    plock,         \* prefill holds the prefix locked (source pages pinned)
    dstate,        \* decode side: "waiting", "aborted" or "done"
    dalloc,        \* dalloc[i]: decode holds a destination page for page i
    dfree,         \* free pages of the decode pool
    xfer,          \* xfer[i]: "none", "inflight" or "done"
    dread,         \* dread[i]: decode read page i
    sentUnloaded   \* ghost: pages sent before their load-back finished

vars == <<ploc, pstate, plock, dstate, dalloc, dfree, xfer, dread, sentUnloaded>>

TypeOK ==
    /\ ploc \in [Pages -> Tiers]
    /\ pstate \in {"running", "aborted", "done"}
    /\ plock \in BOOLEAN
    /\ dstate \in {"waiting", "aborted", "done"}
    /\ dalloc \in [Pages -> BOOLEAN]
    /\ dfree \in 0..NDecodeSlots
    /\ xfer \in [Pages -> {"none", "inflight", "done"}]
    /\ dread \in [Pages -> BOOLEAN]
    /\ sentUnloaded \subseteq Pages

InFlight   == {i \in Pages : xfer[i] = "inflight"}
Allocated  == {i \in Pages : dalloc[i]}
AllLanded  == \A i \in Pages : xfer[i] = "done"

(* The hit: a prefix whose pages sit on device, then host, then storage.   *)
Init ==
    /\ ploc \in {f \in [Pages -> Tiers] :
                    \A i \in Pages : i > 1 => TierRank(f[i - 1]) <= TierRank(f[i])}
    /\ pstate = "running"
    /\ plock = TRUE
    /\ dstate = "waiting"
    /\ dalloc = [i \in Pages |-> FALSE]
    /\ dfree = NDecodeSlots
    /\ xfer = [i \in Pages |-> "none"]
    /\ dread = [i \in Pages |-> FALSE]
    /\ sentUnloaded = {}

(* Prefill moves page i one tier up: storage -> host -> device.            *)
PrefillLoadBack(i) ==
    /\ pstate = "running"
    /\ ploc[i] # "device"
    /\ ploc' = [ploc EXCEPT ![i] = IF ploc[i] = "storage" THEN "host" ELSE "device"]
    /\ UNCHANGED <<pstate, plock, dstate, dalloc, dfree, xfer, dread, sentUnloaded>>

(* Decode allocates the destination page of page i.                        *)
DecodeAllocate(i) ==
    /\ dstate = "waiting"
    /\ ~dalloc[i]
    /\ xfer[i] = "none"
    /\ dfree > 0
    /\ dalloc' = [dalloc EXCEPT ![i] = TRUE]
    /\ dfree' = dfree - 1
    /\ UNCHANGED <<ploc, pstate, plock, dstate, xfer, dread, sentUnloaded>>

(* Prefill sends page i: loaded on device, destination allocated (the bug: *)
(* without waiting for the load-back).                                     *)
PrefillSend(i) ==
    /\ pstate = "running"
    /\ dstate = "waiting"
    /\ xfer[i] = "none"
    /\ dalloc[i]
    /\ BugSendBeforeLoadBack \/ ploc[i] = "device"
    /\ xfer' = [xfer EXCEPT ![i] = "inflight"]
    /\ sentUnloaded' = IF ploc[i] = "device" THEN sentUnloaded ELSE sentUnloaded \cup {i}
    /\ UNCHANGED <<ploc, pstate, plock, dstate, dalloc, dfree, dread>>

(* Page i lands on decode.  After an abort the landed page is freed, and   *)
(* once nothing is in flight the prefill side unpins its prefix.           *)
DecodeReceive(i) ==
    /\ xfer[i] = "inflight"
    /\ xfer' = [xfer EXCEPT ![i] = "done"]
    /\ IF dstate = "aborted" /\ dalloc[i]
       THEN /\ dalloc' = [dalloc EXCEPT ![i] = FALSE]
            /\ dfree' = dfree + 1
       ELSE UNCHANGED <<dalloc, dfree>>
    /\ LET quiet == InFlight = {i}
           all   == \A j \in Pages : j = i \/ xfer[j] = "done"
       IN  /\ pstate' = IF pstate = "running" /\ all THEN "done" ELSE pstate
           /\ plock' = IF quiet /\ (pstate # "running" \/ all) THEN FALSE ELSE plock
    /\ UNCHANGED <<ploc, dstate, dread, sentUnloaded>>

(* Decode reads a landed page; after the last one its request runs.        *)
DecodeRead(i) ==
    /\ dstate = "waiting"
    /\ xfer[i] = "done"
    /\ ~dread[i]
    /\ dread' = [dread EXCEPT ![i] = TRUE]
    /\ dstate' = IF \A j \in Pages : j = i \/ dread[j] THEN "done" ELSE dstate
    /\ UNCHANGED <<ploc, pstate, plock, dalloc, dfree, xfer, sentUnloaded>>

(* Prefill aborts: no more sends; the prefix stays pinned until in-flight  *)
(* copies land.                                                            *)
PrefillAbort ==
    /\ pstate = "running"
    /\ pstate' = "aborted"
    /\ plock' = (InFlight # {})
    /\ UNCHANGED <<ploc, dstate, dalloc, dfree, xfer, dread, sentUnloaded>>

(* Decode aborts: it frees every destination page not in flight (the bug:  *)
(* also those in flight).                                                  *)
DecodeAbort ==
    /\ dstate = "waiting"
    /\ LET kept == IF BugAbortFreesInFlight THEN {} ELSE Allocated \cap InFlight
       IN  /\ dalloc' = [i \in Pages |-> i \in kept]
           /\ dfree' = dfree + Cardinality(Allocated \ kept)
    /\ dstate' = "aborted"
    /\ UNCHANGED <<ploc, pstate, plock, xfer, dread, sentUnloaded>>

(* Both sides are done or aborted and nothing is in flight.                *)
Finished ==
    /\ pstate # "running"
    /\ dstate # "waiting"
    /\ InFlight = {}
Terminated == Finished /\ UNCHANGED vars

Next ==
    \/ \E i \in Pages :
        \/ PrefillLoadBack(i) \/ DecodeAllocate(i) \/ PrefillSend(i)
        \/ DecodeReceive(i) \/ DecodeRead(i)
    \/ PrefillAbort
    \/ DecodeAbort
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

(* A cached prefix is sent only after its load-back completed, and its     *)
(* source stays pinned on device while the copy is in flight.              *)
SendAfterLoadBack ==
    /\ sentUnloaded = {}
    /\ \A i \in InFlight : ploc[i] = "device" /\ plock

(* Decode reads only transferred pages.                                    *)
DecodeReadsTransferred ==
    \A i \in Pages : dread[i] => xfer[i] = "done"

(* A copy in flight lands in a page decode still owns (no use-after-free). *)
InFlightDestOwned ==
    \A i \in InFlight : dalloc[i] /\ dstate # "done"

(* Nothing leaks on abort: once nothing is in flight an aborted decode     *)
(* holds no page and a finished or aborted prefill holds no lock; decode   *)
(* pages are conserved.                                                    *)
NoLeakOnAbort ==
    /\ dfree + Cardinality(Allocated) = NDecodeSlots
    /\ (dstate = "aborted" /\ InFlight = {}) => Allocated = {}
    /\ (pstate # "running" /\ InFlight = {}) => ~plock

(* Liveness is checked as deadlock-freedom: every state other than         *)
(* Finished can move, so both sides always end (done or aborted).          *)
=============================================================================
