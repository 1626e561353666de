------------------------------- MODULE PPSync -------------------------------
(***************************************************************************)
(* Pipeline-stage agreement on ready transfers (pp_sync).                  *)
(*                                                                         *)
(* Every pipeline stage runs the same schedule, so every stage issues the  *)
(* same cache transfers in the same order (transfer t is the t-th entry of *)
(* each rank's ack queue).  A transfer completes on each rank (s, r) at    *)
(* its own time, and a rank's transfers may complete out of order.  At a   *)
(* cache check, stage 0 counts on each of its ranks the leading ready      *)
(* transfers of the queue (ready from the head, no gap), MIN-reduces that  *)
(* count over its group, and sends the resulting target (applied + MIN)   *)
(* down the pipeline: stage s receives it from s-1 and forwards it to s+1. *)
(* Each stage then waits on every rank for exactly the transfers up to the *)
(* target and applies them to its cache records.                           *)
(*                                                                         *)
(*   stage 0: LeaderAgree --target--> stage 1: StageForward --> stage 2   *)
(*      |                                  |                        |      *)
(*   StageApply(0)                     StageApply(1)          StageApply(2)*)
(*                                                                         *)
(* Bug twin (PPSync_bug.cfg): BugLocalCount = TRUE makes stages > 0 apply  *)
(* their own leading ready count instead of the agreed one (the reference  *)
(* system's bug 5): SameCountEachCheck fails.                              *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NStages,        \* pipeline stages (>= 1)
    NRanks,         \* ranks per stage (the attention TP/CP group)
    NTransfers,     \* transfers issued in this model
    MaxChecks,      \* cache checks per stage in this model
    BugLocalCount   \* seeded bug: stages > 0 apply their local ready count

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(NStages) /\ Positive(NRanks)
ASSUME NTransfers \in Nat /\ Positive(MaxChecks) /\ BugLocalCount \in BOOLEAN

Stages    == 0..(NStages - 1)
Ranks     == 0..(NRanks - 1)
Transfers == 1..NTransfers
Checks    == 1..MaxChecks
None      == -1

VARIABLES
    issued,    \* transfers 1..issued were issued, on every stage, in order
    done,      \* done[s][r]: transfers completed on rank r of stage s
    applied,   \* applied[s]: stage s applied transfers 1..applied[s]
    checks,    \* checks[s]: cache checks stage s completed
    upto,      \* upto[s][k]: applied[s] right after stage s's check k (0 if not yet)
    agreed,    \* agreed[k]: target stage 0 agreed at check k (None if not yet)
    pending,   \* pending[s]: target stage s holds for its next apply, or None
    chan       \* chan[s]: target in flight from stage s-1 to s (s >= 1), or None

vars == <<issued, done, applied, checks, upto, agreed, pending, chan>>

TypeOK ==
    /\ issued \in 0..NTransfers
    /\ done \in [Stages -> [Ranks -> SUBSET Transfers]]
    /\ applied \in [Stages -> 0..NTransfers]
    /\ checks \in [Stages -> 0..MaxChecks]
    /\ upto \in [Stages -> [Checks -> 0..NTransfers]]
    /\ agreed \in [Checks -> 0..NTransfers \cup {None}]
    /\ pending \in [Stages -> 0..NTransfers \cup {None}]
    /\ chan \in [Stages -> 0..NTransfers \cup {None}]

(* Leading ready transfers of rank (s, r) beyond what stage s applied.     *)
ReadyRun(s, r, n) == \A t \in (applied[s] + 1)..(applied[s] + n) : t \in done[s][r]
Lead(s, r) ==
    CHOOSE n \in 0..NTransfers :
        /\ ReadyRun(s, r, n)
        /\ (applied[s] + n + 1 > NTransfers \/ ~ReadyRun(s, r, n + 1))
MinLead(s) == CHOOSE n \in {Lead(s, r) : r \in Ranks} : \A r \in Ranks : n <= Lead(s, r)

Init ==
    /\ issued = 0
    /\ done = [s \in Stages |-> [r \in Ranks |-> {}]]
    /\ applied = [s \in Stages |-> 0]
    /\ checks = [s \in Stages |-> 0]
    /\ upto = [s \in Stages |-> [k \in Checks |-> 0]]
    /\ agreed = [k \in Checks |-> None]
    /\ pending = [s \in Stages |-> None]
    /\ chan = [s \in Stages |-> None]

(* Every stage issues the next transfer: same transfer, same order.        *)
TransferIssue ==
    /\ issued < NTransfers
    /\ issued' = issued + 1
    /\ UNCHANGED <<done, applied, checks, upto, agreed, pending, chan>>

(* Transfer t completes on rank r of stage s (any order, any time).        *)
TransferComplete(t, s, r) ==
    /\ t <= issued
    /\ t \notin done[s][r]
    /\ done' = [done EXCEPT ![s][r] = @ \cup {t}]
    /\ UNCHANGED <<issued, applied, checks, upto, agreed, pending, chan>>

(* Round k (1-based) of stage s is the one after its last check.           *)
Round(s) == checks[s] + 1

(* Stage 0 MIN-reduces the leading ready counts of its ranks and sends the *)
(* target down the pipeline.  A check whose count is 0 changes nothing and *)
(* is not modelled as a round.                                             *)
LeaderAgree ==
    /\ pending[0] = None
    /\ checks[0] < MaxChecks
    /\ MinLead(0) > 0
    /\ IF NStages > 1 THEN chan[1] = None ELSE TRUE
    /\ LET target == applied[0] + MinLead(0)
       IN  /\ pending' = [pending EXCEPT ![0] = target]
           /\ agreed' = [agreed EXCEPT ![Round(0)] = target]
           /\ chan' = IF NStages > 1 THEN [chan EXCEPT ![1] = target] ELSE chan
    /\ UNCHANGED <<issued, done, applied, checks, upto>>

(* Stage s >= 1 receives the target from s-1 and forwards it to s+1.       *)
StageForward(s) ==
    /\ s >= 1
    /\ pending[s] = None
    /\ chan[s] # None
    /\ IF s < NStages - 1 THEN chan[s + 1] = None ELSE TRUE
    /\ pending' = [pending EXCEPT ![s] = chan[s]]
    /\ chan' = IF s = NStages - 1
               THEN [chan EXCEPT ![s] = None]
               ELSE [chan EXCEPT ![s] = None, ![s + 1] = chan[s]]
    /\ UNCHANGED <<issued, done, applied, checks, upto, agreed>>

(* The target stage s applies at this check (the bug: its local count).    *)
ApplyTarget(s) ==
    IF BugLocalCount /\ s > 0 THEN applied[s] + MinLead(s) ELSE pending[s]

(* Stage s waits on every rank for exactly the transfers up to the target, *)
(* then applies them, in queue order, to its cache records.                *)
StageApply(s) ==
    /\ pending[s] # None
    /\ LET target == ApplyTarget(s)
       IN  /\ \A r \in Ranks : \A t \in (applied[s] + 1)..target : t \in done[s][r]
           /\ applied' = [applied EXCEPT ![s] = target]
           /\ upto' = [upto EXCEPT ![s][Round(s)] = target]
    /\ checks' = [checks EXCEPT ![s] = checks[s] + 1]
    /\ pending' = [pending EXCEPT ![s] = None]
    /\ UNCHANGED <<issued, done, agreed, chan>>

(* Every stage applied every transfer, or ran out of modelled checks.      *)
Finished ==
    /\ issued = NTransfers
    /\ \A s \in Stages : applied[s] = NTransfers \/ checks[s] = MaxChecks
Terminated == Finished /\ UNCHANGED vars

Next ==
    \/ TransferIssue
    \/ \E t \in Transfers, s \in Stages, r \in Ranks : TransferComplete(t, s, r)
    \/ LeaderAgree
    \/ \E s \in Stages : StageForward(s) \/ StageApply(s)
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

(* Every stage applies the same count at each cache check.  Counts are     *)
(* differences of consecutive targets, so equal targets mean equal counts; *)
(* and since each stage applies the leading transfers of the same queue,   *)
(* the order is the same too.                                              *)
SameCountEachCheck ==
    \A s1, s2 \in Stages : \A k \in Checks :
        (k <= checks[s1] /\ k <= checks[s2]) => upto[s1][k] = upto[s2][k]

(* No stage applies a transfer before it completed on that stage.          *)
ApplyOnlyCompleted ==
    \A s \in Stages, r \in Ranks : \A t \in 1..applied[s] : t \in done[s][r]

(* Rounds stage 0 agreed so far.                                           *)
AgreedRounds == checks[0] + (IF pending[0] # None THEN 1 ELSE 0)

(* Applied transfers were issued, and no stage runs ahead of stage 0.      *)
AppliedIssued ==
    \A s \in Stages : applied[s] <= issued /\ checks[s] <= AgreedRounds

(* Rounds stage s received: stage 0 agreed them, stage s >= 1 got them     *)
(* from its channel (applied or pending).                                  *)
Received(s) == IF s = 0 THEN AgreedRounds
               ELSE checks[s] + (IF pending[s] # None THEN 1 ELSE 0)

(* Inductive strengthening: what is in flight is what stage 0 agreed, and  *)
(* each channel holds at most the one round its receiver has not taken.   *)
\* Z3-INDUCTIVE: IndInv
IndInv ==
    /\ TypeOK
    /\ SameCountEachCheck
    /\ ApplyOnlyCompleted
    /\ AppliedIssued
    /\ \A s \in Stages : \A k \in Checks : k <= checks[s] => upto[s][k] = agreed[k]
    /\ \A s \in Stages : applied[s] = IF checks[s] = 0 THEN 0 ELSE upto[s][checks[s]]
    /\ \A k \in Checks : agreed[k] # None <=> k <= AgreedRounds
    /\ \A k \in Checks : (agreed[k] # None /\ k > 1) => agreed[k - 1] <= agreed[k]
    /\ \A k \in Checks : agreed[k] # None => agreed[k] <= issued
    /\ \A s \in Stages, r \in Ranks : done[s][r] \subseteq 1..issued
    /\ \A s \in Stages : Received(s) <= MaxChecks
    /\ \A s \in Stages : s >= 1 =>
          Received(s - 1) = Received(s) + (IF chan[s] # None THEN 1 ELSE 0)
    /\ \A s \in Stages : pending[s] # None => pending[s] = agreed[Round(s)]
    /\ \A s \in Stages : s >= 1 /\ chan[s] # None => chan[s] = agreed[Received(s) + 1]
    /\ chan[0] = None

(* Symmetry: the ranks of a stage are interchangeable (every action and    *)
(* property treats them alike), so a model may identify states that differ *)
(* only by which rank of a stage completed what (cfg: VIEW View).  The     *)
(* multiset of per-rank completion sets is what stays.                     *)
RankBag(s) == [X \in SUBSET Transfers |-> Cardinality({r \in Ranks : done[s][r] = X})]
View == <<issued, [s \in Stages |-> RankBag(s)], applied, checks, upto, agreed, pending, chan>>

(* Liveness is checked as deadlock-freedom: a stage that waits for its     *)
(* transfers always gets them, so with MaxChecks >= NTransfers every stage *)
(* eventually applies every transfer (Finished).                           *)
-----------------------------------------------------------------------------
(* Inductiveness of IndInv, proved by `hicache prove` (Z3) for every        *)
(* pipeline of 1 to 8 stages, beyond what breadth-first search exhausts:   *)
(* from any state satisfying IndInv (not only reachable ones), every step  *)
(* keeps it.  The constants pinned in the hypothesis split the theorem     *)
(* into one obligation per NStages.                                        *)
THEOREM IndInvInductive ==
    (NStages \in 1..8 /\ NRanks = 2 /\ NTransfers = 2 /\ MaxChecks = 2 /\ BugLocalCount = FALSE)
        => (IndInv /\ Next => IndInv')
=============================================================================
