------------------------- MODULE PrefixAgreementCore -------------------------
(***************************************************************************)
(* The agreement core of PrefixAgreement.tla, in the fragment `hicache      *)
(* prove` translates to Z3, so that its inductive invariant is proved for  *)
(* every pipeline of 1 to 8 stages (THEOREM IndInvInductive at the end).   *)
(*                                                                         *)
(* Same protocol, same action and property names; only the encoding       *)
(* differs, each change keeping the meaning:                               *)
(*  - ranks are integers 0..NStages*NRanks-1 (rank k is rank k % NRanks of *)
(*    stage k \div NRanks; no action or property depends on where a rank   *)
(*    is, as PrefixAgreement's View already says);                         *)
(*  - stop policies and verdicts are integers (BestEffort, WaitComplete,   *)
(*    Timeout; Continue, Stop), None is -1 as before;                      *)
(*  - every policy is explored (PrefixAgreement's Policies = AllPolicies); *)
(*  - the agreed prefix is the MIN of one offer per batch (PrefixOf), the  *)
(*    same value as the leading run of full acks (checked by the cfg);     *)
(*  - ranges over state (1..pub, 1..checks[s]) are written as constant     *)
(*    ranges with a guard, so the prover expands them.                     *)
(* BugNoAckAfterStop (a deadlock, not a safety violation) is left out: an *)
(* inductive invariant cannot see it; PrefixAgreement_bug_noack.cfg does.  *)
(*                                                                         *)
(* Bug twin: ConsumeLatestProgress = TRUE makes stages > 0 consume every   *)
(* ack published by their own check (the reference system's bug 5);       *)
(* SameAcksConsumed, then SameCachedPrefix, fail.                          *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NStages,                \* pipeline stages
    NRanks,                 \* ranks per stage
    NBatches,               \* batches of the prefetch
    BatchPages,             \* pages per batch
    ConsumeLatestProgress   \* seeded bug: stages > 0 consume all published acks

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(NStages) /\ Positive(NRanks)
ASSUME Positive(NBatches) /\ Positive(BatchPages)
ASSUME ConsumeLatestProgress \in BOOLEAN

(* Stop policies (PrefixAgreement's strings) and verdicts (its booleans).  *)
BestEffort   == 0
WaitComplete == 1
Timeout      == 2
AllPolicies  == {BestEffort, WaitComplete, Timeout}
Continue     == 0
Stop         == 1
None         == -1

Stages    == 0..(NStages - 1)
Ranks     == 0..(NStages * NRanks - 1)  \* every rank of every stage
Batches   == 1..NBatches
MaxPages  == NBatches * BatchPages
MaxChecks == NBatches + 1               \* enough for wait_complete to finish
Checks    == 1..MaxChecks

VARIABLES
    policy,      \* the stop policy of this run
    tried,       \* tried[k]: batches rank k finished and acked (0..NBatches)
    loaded,      \* loaded[k]: leading pages rank k loaded
    terminated,  \* the MAX-reduced stop verdict reached the ranks
    pub,         \* length of the ordered ack queue: acks 1..pub are published
    pubAck,      \* pubAck[j]: published MIN of the j-th acks, or None
    checks,      \* checks[s]: cache checks stage s ran for this request
    verdict,     \* verdict[c]: stage 0's verdict at check c (Continue, Stop), or None
    cut,         \* cut[c]: acks consumed through check c, decided by stage 0, or None
    consumed,    \* consumed[s]: acks stage s consumed from its queue
    used         \* used[s]: cached prefix (pages) stage s uses, or None while waiting

vars == <<policy, tried, loaded, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

TypeOK ==
    /\ policy \in AllPolicies
    /\ tried \in [Ranks -> 0..NBatches]
    /\ loaded \in [Ranks -> 0..MaxPages]
    /\ terminated \in BOOLEAN
    /\ pub \in 0..NBatches
    /\ pubAck \in [Batches -> 0..BatchPages \cup {None}]
    /\ checks \in [Stages -> 0..MaxChecks]
    /\ verdict \in [Checks -> {None, Continue, Stop}]
    /\ cut \in [Checks -> 0..NBatches \cup {None}]
    /\ consumed \in [Stages -> 0..NBatches]
    /\ used \in [Stages -> 0..MaxPages \cup {None}]

Min(S) == CHOOSE m \in S : \A x \in S : m <= x
Clamp(x) == IF x < 0 THEN 0 ELSE IF x > BatchPages THEN BatchPages ELSE x

(* The ack rank k posts for batch j: pages of batch j it loaded.  Loads    *)
(* stop at the first short batch, so no later batch extends a holey prefix.*)
AckOf(k, j) == Clamp(loaded[k] - (j - 1) * BatchPages)

(* The ordered queue's j-th entry: the MIN over every rank of its j-th ack.*)
MinAck(j) == Min({AckOf(k, j) : k \in Ranks})

(* A rank stops loading after a failure (a short batch) or a termination.  *)
Failed(k)  == loaded[k] < tried[k] * BatchPages
Stopped(k) == Failed(k) \/ terminated

(* Agreed prefix of the first n published acks: the leading run of full    *)
(* acks plus the loaded part of the first short one.  As a MIN: a short    *)
(* ack j offers (j-1)*BatchPages + pubAck[j] pages, and no short one, n    *)
(* batches; the first short ack offers the least (a later one offers at    *)
(* least (j-1)*BatchPages, more than the first), so the MIN of the offers  *)
(* is PrefixAgreement's PrefixOf (the cfg checks it against the leading    *)
(* run: PrefixOfIsLeadingRun); a MIN of NBatches + 1 offers is cheaper for *)
(* Z3 than a CHOOSE of the run.                                            *)
Offer(n, j) ==
    IF 1 <= j /\ j <= n /\ pubAck[j] < BatchPages THEN (j - 1) * BatchPages + pubAck[j]
    ELSE n * BatchPages
PrefixOf(n) == Min({Offer(n, j) : j \in 0..NBatches})

Init ==
    /\ policy \in AllPolicies
    /\ tried = [k \in Ranks |-> 0]
    /\ loaded = [k \in Ranks |-> 0]
    /\ terminated = FALSE
    /\ pub = 0
    /\ pubAck = [j \in Batches |-> None]
    /\ checks = [s \in Stages |-> 0]
    /\ verdict = [c \in Checks |-> None]
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
    /\ tried' = [tried EXCEPT ![k] = tried[k] + 1]
    /\ UNCHANGED <<policy, loaded, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

(* The sync step MIN-reduces the next ack over every rank and publishes it.*)
SyncPublish ==
    /\ pub < NBatches
    /\ \A k \in Ranks : tried[k] > pub
    /\ pubAck' = [pubAck EXCEPT ![pub + 1] = MinAck(pub + 1)]
    /\ pub' = pub + 1
    /\ UNCHANGED <<policy, tried, loaded, terminated, checks, verdict, cut, consumed, used>>

(* Verdicts a policy allows at check c, by table: best_effort stops at     *)
(* once, wait_complete never early, timeout at any check and at the last.  *)
Allowed(p, c, v) ==
    CASE p = BestEffort   -> v = Stop
      [] p = WaitComplete -> v = Continue
      [] p = Timeout      -> c = MaxChecks => v = Stop

(* Stage 0 decides, at its next check, whether the prefetch stops now.     *)
(* A check that does not stop the prefetch needs new acks (else it changes *)
(* nothing).  A stop is MAX-reduced to all ranks at once.                  *)
PolicyDecide ==
    LET c == checks[0] + 1 IN
    /\ used[0] = None
    /\ c <= MaxChecks
    /\ verdict[c] = None
    /\ \E v \in {Continue, Stop} :
        /\ Allowed(policy, c, v)
        /\ v = Stop \/ pub > consumed[0]
        /\ verdict' = [verdict EXCEPT ![c] = v]
        /\ terminated' = (terminated \/ v = Stop)
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
    /\ verdict[c] # None
    /\ s > 0 => checks[s - 1] >= c
    /\ LET n == CutAt(s, c) IN
        /\ consumed' = [consumed EXCEPT ![s] = n]
        /\ cut' = IF s = 0 THEN [cut EXCEPT ![c] = n] ELSE cut
        /\ used' = IF verdict[c] = Stop \/ n = NBatches
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
(* Safety properties (PrefixAgreement's, same names).                       *)

(* The published prefix is <= what every rank loaded.                      *)
PublishedLeLoaded ==
    \A n \in 0..NBatches : n <= pub => \A k \in Ranks : PrefixOf(n) <= loaded[k]

(* All stages use the same cached prefix for the request, even when later  *)
(* acks are already published on them.                                     *)
SameCachedPrefix ==
    \A s1, s2 \in Stages : (used[s1] # None /\ used[s2] # None) => used[s1] = used[s2]

(* A stage uses only a prefix every rank loaded.                           *)
UsedLeLoaded ==
    \A s \in Stages : used[s] # None => \A k \in Ranks : used[s] <= loaded[k]

(* Every rank emits the same number of acks, failures included: the queue  *)
(* never gets ahead of any rank, nor a stage ahead of the queue.           *)
AcksInStep ==
    /\ \A k \in Ranks : pub <= tried[k]
    /\ \A s \in Stages : consumed[s] <= pub

(* Stages consume the acks in the same order: stage s's consumption after  *)
(* check c is stage 0's cut of check c.                                    *)
SameAcksConsumed ==
    \A s \in Stages : checks[s] > 0 => consumed[s] = cut[checks[s]]

(* PrefixAgreement's own formulation of the agreed prefix, the leading run *)
(* of full acks plus the first short ack, and the check that PrefixOf (the *)
(* MIN of the offers, cheaper for Z3) has the same value.                  *)
Short(n) == {j \in 1..n : pubAck[j] < BatchPages}
LeadingRun(n) ==
    IF Short(n) = {} THEN n * BatchPages
    ELSE LET j == Min(Short(n)) IN (j - 1) * BatchPages + pubAck[j]
PrefixOfIsLeadingRun == \A n \in 0..pub : PrefixOf(n) = LeadingRun(n)

(* Symmetry: all ranks are interchangeable (loading, acks and the MIN treat *)
(* them alike), so a model may identify states that differ only by which   *)
(* rank is where (cfg: VIEW View).  The multiset of per-rank (tried,       *)
(* loaded) pairs is what stays.                                            *)
RankBag == [x \in (0..NBatches) \X (0..MaxPages) |->
                Cardinality({k \in Ranks : <<tried[k], loaded[k]>> = x})]
View == <<policy, RankBag, terminated, pub, pubAck, checks, verdict, cut, consumed, used>>

(* Inductive strengthening, PrefixAgreement's IndInv in this encoding and  *)
(* pared down for Z3.  Ranks never load past their acks; a published ack   *)
(* is at most each rank's ack of its batch, as acks only grow (the MIN     *)
(* itself, which PrefixAgreement states, is more than safety needs); the   *)
(* queue is filled exactly up to pub and stage 0's cuts up to its checks,  *)
(* cuts grow and are published and decided; every check before a stage's   *)
(* last one, and each check of a stage still waiting, neither stopped nor  *)
(* consumed every batch -- so a stage that chose a prefix chose it at the  *)
(* check where stage 0 chose its own, from the same cut: it equals stage   *)
(* 0's, which is PrefixOf of that cut (one MIN, not one per stage).        *)
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
    /\ \A j \in Batches : j <= pub => \A k \in Ranks : pubAck[j] <= AckOf(k, j)
    /\ \A c \in Checks : (cut[c] # None) <=> c <= checks[0]
    /\ \A c \in Checks : (verdict[c] # None) => c <= checks[0] + 1
    /\ \A c \in Checks : (cut[c] # None /\ c > 1) => cut[c - 1] <= cut[c]
    /\ \A c \in Checks : cut[c] # None => cut[c] <= pub /\ verdict[c] # None
    /\ \A s \in Stages : used[s] = None =>
          \A c \in Checks : c <= checks[s] => verdict[c] = Continue /\ cut[c] < NBatches
    /\ \A s \in Stages : s > 0 => checks[s] <= checks[s - 1]
    /\ used[0] # None => used[0] = PrefixOf(consumed[0])
    /\ \A s \in Stages : used[s] # None =>
          /\ used[0] = used[s]
          /\ consumed[0] = consumed[s]
          /\ checks[s] > 0
          /\ (verdict[checks[s]] = Stop \/ consumed[s] = NBatches)
    /\ \A s \in Stages : \A c \in Checks :
          c < checks[s] => verdict[c] = Continue /\ cut[c] < NBatches
    /\ (\E c \in Checks : verdict[c] = Stop) => terminated
-----------------------------------------------------------------------------
(* Inductiveness of IndInv, proved by `hicache prove` (Z3) for every        *)
(* pipeline of 1 to 8 stages (2 to 16 ranks), 2 ranks per stage, 2 batches *)
(* of 2 pages (so a batch can fail part-way): from any state satisfying    *)
(* IndInv, not only the reachable ones `hicache check` visits, every step  *)
(* keeps it.  The pinned constants split it into one obligation per        *)
(* NStages.                                                                *)
THEOREM IndInvInductive ==
    (NStages \in 1..8 /\ NRanks = 2 /\ NBatches = 2 /\ BatchPages = 2 /\ ConsumeLatestProgress = FALSE)
        => (IndInv /\ Next => IndInv')
=============================================================================
