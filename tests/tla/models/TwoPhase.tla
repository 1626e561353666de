---------------------------- MODULE TwoPhase ----------------------------
(* Two-phase commit (after Lamport's TwoPhase), messages as a set of records. *)
EXTENDS FiniteSets

CONSTANT RM

VARIABLES
    rmState,   \* rmState[r] \in {"working", "prepared", "committed", "aborted"}
    tmState,   \* "init", "committed" or "aborted"
    tmPrepared,\* the RMs the TM has seen Prepared from
    msgs       \* every message ever sent

vars == <<rmState, tmState, tmPrepared, msgs>>

Messages == [type : {"Prepared"}, rm : RM] \cup [type : {"Commit", "Abort"}]

TypeOK == /\ rmState \in [RM -> {"working", "prepared", "committed", "aborted"}]
          /\ tmState \in {"init", "committed", "aborted"}
          /\ tmPrepared \subseteq RM
          /\ msgs \subseteq Messages

Init == /\ rmState = [r \in RM |-> "working"]
        /\ tmState = "init"
        /\ tmPrepared = {}
        /\ msgs = {}

TMRcvPrepared(r) == /\ tmState = "init"
                    /\ [type |-> "Prepared", rm |-> r] \in msgs
                    /\ tmPrepared' = tmPrepared \cup {r}
                    /\ UNCHANGED <<rmState, tmState, msgs>>

TMCommit == /\ tmState = "init"
            /\ tmPrepared = RM
            /\ tmState' = "committed"
            /\ msgs' = msgs \cup {[type |-> "Commit"]}
            /\ UNCHANGED <<rmState, tmPrepared>>

TMAbort == /\ tmState = "init"
           /\ tmState' = "aborted"
           /\ msgs' = msgs \cup {[type |-> "Abort"]}
           /\ UNCHANGED <<rmState, tmPrepared>>

RMPrepare(r) == /\ rmState[r] = "working"
                /\ rmState' = [rmState EXCEPT ![r] = "prepared"]
                /\ msgs' = msgs \cup {[type |-> "Prepared", rm |-> r]}
                /\ UNCHANGED <<tmState, tmPrepared>>

RMChooseToAbort(r) == /\ rmState[r] = "working"
                      /\ rmState' = [rmState EXCEPT ![r] = "aborted"]
                      /\ UNCHANGED <<tmState, tmPrepared, msgs>>

RMRcvCommitMsg(r) == /\ [type |-> "Commit"] \in msgs
                     /\ rmState' = [rmState EXCEPT ![r] = "committed"]
                     /\ UNCHANGED <<tmState, tmPrepared, msgs>>

RMRcvAbortMsg(r) == /\ [type |-> "Abort"] \in msgs
                    /\ rmState' = [rmState EXCEPT ![r] = "aborted"]
                    /\ UNCHANGED <<tmState, tmPrepared, msgs>>

Next == \/ TMCommit \/ TMAbort
        \/ \E r \in RM : \/ TMRcvPrepared(r) \/ RMPrepare(r) \/ RMChooseToAbort(r)
                         \/ RMRcvCommitMsg(r) \/ RMRcvAbortMsg(r)

Spec == Init /\ [][Next]_vars

NeverCommits == tmState # "committed"   \* violated: its trace shows records and sets

Consistent == \A r1, r2 \in RM : ~(rmState[r1] = "aborted" /\ rmState[r2] = "committed")
=============================================================================
