--------------------------- MODULE PrefixAgreement ---------------------------
(***************************************************************************)
(* Storage prefetch progress agreed across ranks and pipeline stages.      *)
(*                                                                         *)
(* A request's prefix is prefetched from storage in NBatches batches of    *)
(* BatchPages pages.  Every rank (s, r) -- stage s, rank r of its group -- *)
(* loads its own pages in a background I/O thread; progress is rank-local  *)
(* and a batch may fail part-way (the rank then loads nothing more).  The  *)
(* I/O thread posts exactly one ack per batch, the pages of that batch it  *)
(* loaded, also after a failure or a termination (then 0), so every rank   *)
(* posts the same number of acks.  A sync step MIN-reduces the j-th ack    *)
(* over all ranks and publishes it to an ordered ack queue.  The agreed    *)
(* prefix of j acks is the leading run of full batches plus the loaded     *)
(* part of the first short batch.                                          *)
(*                                                                         *)
(* At a cache check stage 0 decides, by the stop policy, whether the       *)
(* prefetch ends now (best_effort: at once; wait_complete: never early;    *)
(* timeout: when the budget for the request's pages is spent), MAX-reduces *)
(* the verdict to every rank (which then stops loading) and passes the     *)
(* verdict and the number of acks it consumed down the pipeline.  Every    *)
(* stage consumes exactly those acks, so every stage uses the same cached  *)
(* prefix even when later acks are already published on it.               *)
(*                                                                         *)
(*  rank (s,r): load b1 -> ack1, load b2 -> ack2 (0 after fail/terminate)  *)
(*  sync:       ack j = MIN over all ranks  ==> ordered queue [a1, a2]     *)
(*  stage 0:    PolicyDecide, StageCacheCheck: consume n acks --n--> s=1   *)
(*  stage s:    StageCacheCheck: consume exactly n acks   --n--> s+1       *)
(*                                                                         *)
(* Bug twins: ConsumeLatestProgress = TRUE makes stages > 0 consume every  *)
(* ack published by the time of their own check (the reference system's   *)
(* bug 5): SameCachedPrefix fails.  BugNoAckAfterStop = TRUE makes a rank  *)
(* that failed or was terminated leave its loop without posting its        *)
(* remaining acks (bug 1): the sync starves, a deadlock.                   *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NStages,                \* pipeline stages
    NRanks,                 \* ranks per stage
    NBatches,               \* batches of the prefetch
    BatchPages,             \* pages per batch
    Policies,               \* stop policies explored (a subset of AllPolicies)
    ConsumeLatestProgress,  \* seeded bug: stages > 0 consume all published acks
    BugNoAckAfterStop,      \* seeded bug: a stopped rank posts no more acks
    NoVerdict               \* model value: a check with no stop verdict yet (a verdict is a
                            \* boolean; TLC compares a model value with any value, unequal)

AllPolicies == {"best_effort", "wait_complete", "timeout"}

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(NStages) /\ Positive(NRanks)
ASSUME Positive(NBatches) /\ Positive(BatchPages)
ASSUME Policies \subseteq AllPolicies /\ Policies # {}
ASSUME ConsumeLatestProgress \in BOOLEAN /\ BugNoAckAfterStop \in BOOLEAN

Stages    == 0..(NStages - 1)
RankIds   == 0..(NRanks - 1)
Ranks     == Stages \X RankIds          \* every rank of every stage
Batches   == 1..NBatches
MaxPages  == NBatches * BatchPages
MaxChecks == NBatches + 1               \* enough for wait_complete to finish
Checks    == 1..MaxChecks
None      == -1

VARIABLES
    policy,      \* the stop policy of this run
    tried,       \* tried[k]: batches rank k finished and acked (0..NBatches)
    loaded,      \* loaded[k]: leading pages rank k loaded
    terminated,  \* the MAX-reduced stop verdict reached the ranks
    pub,         \* acks published on the ordered queue (1..pub)
    pubAck,      \* pubAck[j]: published MIN of the j-th acks, or None
    checks,      \* checks[s]: cache checks stage s ran for this request
    verdict,     \* verdict[k]: stage 0's stop verdict at check k, or NoVerdict
    cut,         \* cut[k]: acks consumed through check k, decided by stage 0, or None
    consumed,    \* consumed[s]: acks stage s consumed from its queue
    used         \* used[s]: cached prefix (pages) stage s uses, or None while waiting

vars == <<policy, tried, loaded, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

TypeOK ==
    /\ policy \in Policies
    /\ tried \in [Ranks -> 0..NBatches]
    /\ loaded \in [Ranks -> 0..MaxPages]
    /\ terminated \in BOOLEAN
    /\ pub \in 0..NBatches
    /\ pubAck \in [Batches -> 0..BatchPages \cup {None}]
    /\ checks \in [Stages -> 0..MaxChecks]
    /\ verdict \in [Checks -> BOOLEAN \cup {NoVerdict}]
    /\ cut \in [Checks -> 0..NBatches \cup {None}]
    /\ consumed \in [Stages -> 0..NBatches]
    /\ used \in [Stages -> 0..MaxPages \cup {None}]

Min(S) == CHOOSE m \in S : \A x \in S : m <= x
Clamp(x) == IF x < 0 THEN 0 ELSE IF x > BatchPages THEN BatchPages ELSE x

(* The ack rank k posts for batch j: pages of batch j it loaded.  Loads    *)
(* stop at the first short batch, so no later batch extends a holey prefix.*)
AckOf(k, j) == Clamp(loaded[k] - (j - 1) * BatchPages)

(* A rank stops loading after a failure (a short batch) or a termination.  *)
Failed(k)  == loaded[k] < tried[k] * BatchPages
Stopped(k) == Failed(k) \/ terminated

(* Agreed prefix of the first n published acks.                            *)
Short(n) == {j \in 1..n : pubAck[j] < BatchPages}
PrefixOf(n) ==
    IF Short(n) = {} THEN n * BatchPages
    ELSE LET j == Min(Short(n)) IN (j - 1) * BatchPages + pubAck[j]

Init ==
    /\ policy \in Policies
    /\ tried = [k \in Ranks |-> 0]
    /\ loaded = [k \in Ranks |-> 0]
    /\ terminated = FALSE
    /\ pub = 0
    /\ pubAck = [j \in Batches |-> None]
    /\ checks = [s \in Stages |-> 0]
    /\ verdict = [c \in Checks |-> NoVerdict]
    /\ cut = [c \in Checks |-> None]
    /\ consumed = [s \in Stages |-> 0]
    /\ used = [s \in Stages |-> None]

(* Rank k loads its next batch: all of it, or a leading part and fails.    *)
(* The I/O thread posts the batch's ack in the same step.                  *)
RankLoadBatch(k) ==
    /\ tried[k] < NBatches
    /\ ~Stopped(k)
    /\ \E got \in 0..BatchPages :
        loaded' = [loaded EXCEPT ![k] = loaded[k] + got]
    /\ tried' = [tried EXCEPT ![k] = tried[k] + 1]
    /\ UNCHANGED <<policy, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

(* A stopped rank still posts one ack (of 0 pages) per remaining batch.    *)
RankPostAck(k) ==
    /\ tried[k] < NBatches
    /\ Stopped(k)
    /\ ~BugNoAckAfterStop
    /\ tried' = [tried EXCEPT ![k] = tried[k] + 1]
    /\ UNCHANGED <<policy, loaded, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

(* The sync step MIN-reduces the next ack over every rank and publishes it.*)
SyncPublish ==
    /\ pub < NBatches
    /\ \A k \in Ranks : tried[k] > pub
    /\ pubAck' = [pubAck EXCEPT ![pub + 1] = Min({AckOf(k, pub + 1) : k \in Ranks})]
    /\ pub' = pub + 1
    /\ UNCHANGED <<policy, tried, loaded, terminated, checks, verdict, cut, consumed, used>>

(* Verdicts a policy allows at check c, by table.                          *)
Verdicts(p, c) ==
    CASE p = "best_effort"   -> {TRUE}
      [] p = "wait_complete" -> {FALSE}
      [] p = "timeout"       -> IF c = MaxChecks THEN {TRUE} ELSE BOOLEAN

(* Stage 0 decides, at its next check, whether the prefetch stops now.     *)
(* A check that does not stop the prefetch needs new acks (else it changes *)
(* nothing); timeout may fire at any check and has fired by the last one.  *)
(* A stop is MAX-reduced to all ranks at once.                             *)
PolicyDecide ==
    LET c == checks[0] + 1 IN
    /\ used[0] = None
    /\ c <= MaxChecks
    /\ verdict[c] = NoVerdict
    /\ \E stop \in Verdicts(policy, c) :
        /\ stop \/ pub > consumed[0]
        /\ verdict' = [verdict EXCEPT ![c] = stop]
        /\ terminated' = (terminated \/ stop)
    /\ UNCHANGED <<policy, tried, loaded, pub, pubAck, checks, cut, consumed, used>>

(* Acks stage s takes at its check c: stage 0 takes every published ack    *)
(* and passes the cut down; later stages take exactly that cut (the bug:   *)
(* whatever is published by their own check).                              *)
CutAt(s, c) ==
    IF s = 0 THEN pub
    ELSE IF ConsumeLatestProgress THEN pub
    ELSE cut[c]

(* Stage s runs check c: consumes the agreed acks; the prefetch is over    *)
(* when stage 0 stopped it or every batch was consumed.                    *)
StageCacheCheck(s) ==
    LET c == checks[s] + 1 IN
    /\ used[s] = None
    /\ c <= MaxChecks
    /\ verdict[c] # NoVerdict
    /\ s > 0 => checks[s - 1] >= c
    /\ LET n == CutAt(s, c) IN
        /\ consumed' = [consumed EXCEPT ![s] = n]
        /\ cut' = IF s = 0 THEN [cut EXCEPT ![c] = n] ELSE cut
        /\ used' = IF verdict[c] \/ n = NBatches
                   THEN [used EXCEPT ![s] = PrefixOf(n)]
                   ELSE used
    /\ checks' = [checks EXCEPT ![s] = c]
    /\ UNCHANGED <<policy, tried, loaded, terminated, pub, pubAck, verdict>>

(* Every stage chose its prefix and every ack was posted and published.    *)
Finished ==
    /\ \A s \in Stages : used[s] # None
    /\ \A k \in Ranks : tried[k] = NBatches
    /\ pub = NBatches
Terminated == Finished /\ UNCHANGED vars

Next ==
    \/ \E k \in Ranks : RankLoadBatch(k) \/ RankPostAck(k)
    \/ SyncPublish
    \/ PolicyDecide
    \/ \E s \in Stages : StageCacheCheck(s)
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

(* The published prefix is <= what every rank loaded.                      *)
PublishedLeLoaded ==
    \A n \in 0..pub : \A k \in Ranks : PrefixOf(n) <= loaded[k]

(* All stages use the same cached prefix for the request, even when later  *)
(* acks are already published on them.                                     *)
SameCachedPrefix ==
    \A s1, s2 \in Stages : (used[s1] # None /\ used[s2] # None) => used[s1] = used[s2]

(* A stage uses only a prefix every rank loaded.                           *)
UsedLeLoaded ==
    \A s \in Stages : used[s] # None => \A k \in Ranks : used[s] <= loaded[k]

(* Every rank emits the same number of acks, failures included: the queue  *)
(* never gets ahead of any rank, and (deadlock-freedom, see Finished) every *)
(* rank eventually posts all NBatches acks.                                *)
AcksInStep ==
    /\ \A k \in Ranks : pub <= tried[k]
    /\ \A s \in Stages : consumed[s] <= pub

(* Stages consume the acks in the same order: stage s's consumption after  *)
(* check c is stage 0's cut of check c.                                    *)
SameAcksConsumed ==
    \A s \in Stages : checks[s] > 0 => consumed[s] = cut[checks[s]]

(* Symmetry: all ranks are interchangeable (loading, acks and the MIN treat *)
(* them alike, whatever their stage), so a model may identify states that  *)
(* differ only by which rank is where (cfg: VIEW View).  The multiset of   *)
(* per-rank (tried, loaded) pairs is what stays.                           *)
RankBag == [x \in (0..NBatches) \X (0..MaxPages) |->
                Cardinality({k \in Ranks : <<tried[k], loaded[k]>> = x})]
View == <<policy, RankBag, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

(* Inductive strengthening used by the Z3 backend.                         *)
\* Z3-INDUCTIVE: IndInv
IndInv ==
    /\ TypeOK
    /\ PublishedLeLoaded
    /\ SameCachedPrefix
    /\ UsedLeLoaded
    /\ AcksInStep
    /\ SameAcksConsumed
    /\ \A k \in Ranks : loaded[k] <= tried[k] * BatchPages
    /\ \A j \in Batches : (pubAck[j] # None) <=> j <= pub
    /\ \A j \in 1..pub : pubAck[j] = Min({AckOf(k, j) : k \in Ranks})
    /\ \A c \in Checks : (cut[c] # None) <=> c <= checks[0]
    /\ \A c \in Checks : (verdict[c] # NoVerdict) => c <= checks[0] + 1
    /\ \A c \in Checks : (cut[c] # None /\ c > 1) => cut[c - 1] <= cut[c]
    /\ \A c \in Checks : cut[c] # None => cut[c] <= pub /\ verdict[c] # NoVerdict
    /\ \A s \in Stages : used[s] = None =>
          \A c \in 1..checks[s] : ~verdict[c] /\ cut[c] < NBatches
    /\ \A s \in Stages : s > 0 => checks[s] <= checks[s - 1]
    /\ \A s \in Stages : used[s] # None =>
          /\ checks[s] > 0
          /\ used[s] = PrefixOf(consumed[s])
          /\ (verdict[checks[s]] \/ consumed[s] = NBatches)
    /\ \A s \in Stages : \A c \in 1..checks[s] :
          (c < checks[s]) => ~verdict[c] /\ cut[c] < NBatches
    /\ (\E c \in Checks : verdict[c] = TRUE) => terminated
=============================================================================
