------------------------------ MODULE PDHandoff ------------------------------
(***************************************************************************)
(* Prefill-decode handoff of a cached prefix, as two engines exchanging   *)
(* messages.                                                               *)
(*                                                                         *)
(* A prefill engine whose request hits a prefix of NPages pages on its     *)
(* device, host or storage tier hands the prefix's KV to a decode engine.  *)
(* The engines share no state: each step below is one engine's local      *)
(* action, reading only its own variables and the head of its inbound      *)
(* channel (FIFO), and appending to its outbound channel.                  *)
(*                                                                         *)
(*   decode  -> prefill : ALLOC(i)  a destination page for page i is owned *)
(*                        ABORT     decode gives up                        *)
(*                        DONE      every page landed and was read         *)
(*                        CLOSED    answer to prefill's ABORT: every copy  *)
(*                                  prefill sent has landed                *)
(*   prefill -> decode  : DATA(i)   page i's copy, in flight until read    *)
(*                        ABORT     prefill sends nothing more             *)
(*                                                                         *)
(*   prefill: LoadBack(i) .. Send(i) [ALLOC(i) -> DATA(i)] .. Release      *)
(*   decode:  Allocate(i) [-> ALLOC(i)] .. Receive(i) Read(i) .. Finish    *)
(*                                                                         *)
(* Prefill loads each page back to device (storage -> host -> device)      *)
(* before it may send it, and keeps the prefix locked until decode         *)
(* confirms that nothing it sent is in flight (DONE or CLOSED).  Either    *)
(* side may abort at any time.  Decode answers an ABORT of prefill (which  *)
(* follows every DATA on the FIFO channel) by freeing everything and       *)
(* sending CLOSED.  Prefill answers an ABORT of decode with its own ABORT; *)
(* until that arrives, decode keeps the pages whose copies may still be in *)
(* flight and frees each one as its copy lands.                            *)
(*                                                                         *)
(* Bug twins: BugAbortFreesInFlight = TRUE makes a decode abort free the   *)
(* destinations of copies that may be in flight (the reference system's   *)
(* bug 12, use-after-free): InFlightDestOwned fails.                       *)
(* BugSendBeforeLoadBack = TRUE sends a page before its load-back finished *)
(* (bug 11, a missing happens-before): SendAfterLoadBack fails.            *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets, Sequences

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

(* A message: its kind and page (0 for the control messages).              *)
Msg(k, i) == <<k, i>>
ToDecode  == {Msg("DATA", i) : i \in Pages} \cup {Msg("ABORT", 0)}
ToPrefill == {Msg("ALLOC", i) : i \in Pages} \cup {Msg(k, 0) : k \in {"ABORT", "DONE", "CLOSED"}}

VARIABLES
    ploc,          \* prefill: ploc[i] is the tier holding page i
    pstate,        \* prefill: "running", "aborting", "done" or "aborted"
    plock,         \* prefill: the prefix is locked (source pages pinned)
    dstate,        \* decode: "waiting", "aborting", "done" or "aborted"
    dalloc,        \* decode: dalloc[i] = it owns a destination page for page i
    dfree,         \* decode: free pages of its pool
    dland,         \* decode: dland[i] = the copy of page i landed
    dread,         \* decode: dread[i] = it read page i
    p2d,           \* channel prefill -> decode (FIFO sequence of messages)
    d2p,           \* channel decode -> prefill (FIFO sequence of messages)
    sentUnloaded   \* ghost: pages sent before their load-back finished

vars  == <<ploc, pstate, plock, dstate, dalloc, dfree, dland, dread, p2d, d2p, sentUnloaded>>
pvars == <<ploc, pstate, plock, sentUnloaded>>
dvars == <<dstate, dalloc, dfree, dland, dread>>

TypeOK ==
    /\ ploc \in [Pages -> Tiers]
    /\ pstate \in {"running", "aborting", "done", "aborted"}
    /\ plock \in BOOLEAN
    /\ dstate \in {"waiting", "aborting", "done", "aborted"}
    /\ dalloc \in [Pages -> BOOLEAN]
    /\ dfree \in 0..NDecodeSlots
    /\ dland \in [Pages -> BOOLEAN]
    /\ dread \in [Pages -> BOOLEAN]
    /\ p2d \in Seq(ToDecode)
    /\ d2p \in Seq(ToPrefill)
    /\ sentUnloaded \subseteq Pages

(* The messages of a channel; the head of a channel is m.                  *)
Range(q)    == {q[k] : k \in 1..Len(q)}
AtHead(q, m) == q # <<>> /\ Head(q) = m

InFlight  == {i \in Pages : Msg("DATA", i) \in Range(p2d)}
Requested == {i \in Pages : Msg("ALLOC", i) \in Range(d2p)}
Allocated == {i \in Pages : dalloc[i]}

(* The hit: a prefix whose pages sit on device, then host, then storage.   *)
Init ==
    /\ ploc \in {f \in [Pages -> Tiers] :
                    \A i \in Pages : i > 1 => TierRank(f[i - 1]) <= TierRank(f[i])}
    /\ pstate = "running"
    /\ plock = TRUE
    /\ dstate = "waiting"
    /\ dalloc = [i \in Pages |-> FALSE]
    /\ dfree = NDecodeSlots
    /\ dland = [i \in Pages |-> FALSE]
    /\ dread = [i \in Pages |-> FALSE]
    /\ p2d = <<>>
    /\ d2p = <<>>
    /\ sentUnloaded = {}

-----------------------------------------------------------------------------
(* Prefill's steps.                                                         *)

(* Prefill moves page i one tier up: storage -> host -> device.            *)
PrefillLoadBack(i) ==
    /\ pstate = "running"
    /\ ploc[i] # "device"
    /\ ploc' = [ploc EXCEPT ![i] = IF ploc[i] = "storage" THEN "host" ELSE "device"]
    /\ UNCHANGED <<pstate, plock, sentUnloaded, p2d, d2p>>
    /\ UNCHANGED dvars

(* Prefill answers ALLOC(i) with page i's copy, once page i is on device   *)
(* (the bug: without waiting for the load-back).                           *)
PrefillSend(i) ==
    /\ pstate = "running"
    /\ AtHead(d2p, Msg("ALLOC", i))
    /\ BugSendBeforeLoadBack \/ ploc[i] = "device"
    /\ d2p' = Tail(d2p)
    /\ p2d' = Append(p2d, Msg("DATA", i))
    /\ sentUnloaded' = IF ploc[i] = "device" THEN sentUnloaded ELSE sentUnloaded \cup {i}
    /\ UNCHANGED <<ploc, pstate, plock>>
    /\ UNCHANGED dvars

(* Prefill aborts (on its own, or seeing decode's ABORT): it sends nothing *)
(* more and keeps its prefix pinned until decode's CLOSED.                 *)
PrefillAbort ==
    /\ pstate = "running"
    /\ pstate' = "aborting"
    /\ p2d' = Append(p2d, Msg("ABORT", 0))
    /\ UNCHANGED <<ploc, plock, sentUnloaded, d2p>>
    /\ UNCHANGED dvars

(* An aborting prefill drops what decode sent before it saw the ABORT.     *)
PrefillDrop ==
    /\ pstate = "aborting"
    /\ d2p # <<>>
    /\ Head(d2p)[1] \in {"ALLOC", "ABORT", "DONE"}
    /\ d2p' = Tail(d2p)
    /\ UNCHANGED <<ploc, pstate, plock, sentUnloaded, p2d>>
    /\ UNCHANGED dvars

(* DONE (all landed) or, after an abort, CLOSED (nothing in flight): the   *)
(* prefill unlocks its prefix.                                             *)
PrefillRelease ==
    /\ \/ pstate = "running" /\ AtHead(d2p, Msg("DONE", 0))
       \/ pstate = "aborting" /\ AtHead(d2p, Msg("CLOSED", 0))
    /\ d2p' = Tail(d2p)
    /\ pstate' = IF pstate = "running" THEN "done" ELSE "aborted"
    /\ plock' = FALSE
    /\ UNCHANGED <<ploc, sentUnloaded, p2d>>
    /\ UNCHANGED dvars

-----------------------------------------------------------------------------
(* Decode's steps.                                                          *)

(* Decode allocates the destination page of page i and asks for it.       *)
DecodeAllocate(i) ==
    /\ dstate = "waiting"
    /\ ~dalloc[i]
    /\ dfree > 0
    /\ dalloc' = [dalloc EXCEPT ![i] = TRUE]
    /\ dfree' = dfree - 1
    /\ d2p' = Append(d2p, Msg("ALLOC", i))
    /\ UNCHANGED <<dstate, dland, dread, p2d>>
    /\ UNCHANGED pvars

(* Page i's copy lands; an aborting decode then frees its page.            *)
DecodeReceive(i) ==
    /\ dstate \in {"waiting", "aborting"}
    /\ AtHead(p2d, Msg("DATA", i))
    /\ p2d' = Tail(p2d)
    /\ dland' = [dland EXCEPT ![i] = TRUE]
    /\ IF dstate = "aborting" /\ dalloc[i]
       THEN /\ dalloc' = [dalloc EXCEPT ![i] = FALSE]
            /\ dfree' = dfree + 1
       ELSE UNCHANGED <<dalloc, dfree>>
    /\ UNCHANGED <<dstate, dread, d2p>>
    /\ UNCHANGED pvars

(* Decode reads a landed page.                                             *)
DecodeRead(i) ==
    /\ dstate = "waiting"
    /\ dland[i]
    /\ ~dread[i]
    /\ dread' = [dread EXCEPT ![i] = TRUE]
    /\ UNCHANGED <<dstate, dalloc, dfree, dland, p2d, d2p>>
    /\ UNCHANGED pvars

(* Every page read: the request runs on decode, which tells prefill.       *)
DecodeFinish ==
    /\ dstate = "waiting"
    /\ \A i \in Pages : dread[i]
    /\ dstate' = "done"
    /\ d2p' = Append(d2p, Msg("DONE", 0))
    /\ UNCHANGED <<dalloc, dfree, dland, dread, p2d>>
    /\ UNCHANGED pvars

(* Decode aborts: it frees every page whose copy cannot be in flight any   *)
(* more (landed ones) and keeps the rest until prefill's ABORT (the bug:   *)
(* it frees them all).                                                     *)
DecodeAbort ==
    /\ dstate = "waiting"
    /\ LET kept == IF BugAbortFreesInFlight THEN {} ELSE {i \in Allocated : ~dland[i]}
       IN  /\ dalloc' = [i \in Pages |-> i \in kept]
           /\ dfree' = dfree + Cardinality(Allocated \ kept)
    /\ dstate' = "aborting"
    /\ d2p' = Append(d2p, Msg("ABORT", 0))
    /\ UNCHANGED <<dland, dread, p2d>>
    /\ UNCHANGED pvars

(* Prefill's ABORT follows every copy it sent: decode frees everything     *)
(* (a finished request keeps its pages) and answers CLOSED.                *)
DecodeClose ==
    /\ dstate # "aborted"
    /\ AtHead(p2d, Msg("ABORT", 0))
    /\ p2d' = Tail(p2d)
    /\ IF dstate = "done"
       THEN UNCHANGED <<dstate, dalloc, dfree>>
       ELSE /\ dstate' = "aborted"
            /\ dalloc' = [i \in Pages |-> FALSE]
            /\ dfree' = dfree + Cardinality(Allocated)
    /\ d2p' = Append(d2p, Msg("CLOSED", 0))
    /\ UNCHANGED <<dland, dread>>
    /\ UNCHANGED pvars

-----------------------------------------------------------------------------
(* Both sides are done or aborted and both channels are empty.             *)
Finished ==
    /\ pstate \in {"done", "aborted"}
    /\ dstate \in {"done", "aborted"}
    /\ p2d = <<>>
    /\ d2p = <<>>
Terminated == Finished /\ UNCHANGED vars

Next ==
    \/ \E i \in Pages :
        \/ PrefillLoadBack(i) \/ PrefillSend(i)
        \/ DecodeAllocate(i) \/ DecodeReceive(i) \/ DecodeRead(i)
    \/ PrefillAbort \/ PrefillDrop \/ PrefillRelease
    \/ DecodeFinish \/ DecodeAbort \/ DecodeClose
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
    \A i \in Pages : dread[i] => dland[i]

(* A copy in flight, or one a running prefill may still send, lands in a   *)
(* page decode owns (no use-after-free).                                   *)
InFlightDestOwned ==
    \A i \in Pages : (i \in InFlight \/ (pstate = "running" /\ i \in Requested)) => dalloc[i]

(* Nothing leaks on abort: decode pages are conserved; an aborting decode  *)
(* holds only pages whose copy has not landed, an aborted one none; a      *)
(* finished or aborted prefill holds no lock.                              *)
NoLeakOnAbort ==
    /\ dfree + Cardinality(Allocated) = NDecodeSlots
    /\ dstate = "aborting" => \A i \in Allocated : ~dland[i]
    /\ dstate = "aborted" => Allocated = {}
    /\ pstate \in {"done", "aborted"} => ~plock

(* Liveness is checked as deadlock-freedom: every state other than         *)
(* Finished can move, so both sides always end (done or aborted) with      *)
(* both channels drained.                                                  *)
=============================================================================
