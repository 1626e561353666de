------------------------ MODULE PrefixAgreementCoreSeeded ------------------------
(* The inductive step of spec/PrefixAgreementCore.tla's IndInv with the     *)
(* seeded bug on: stages > 0 consume every ack published by their own check *)
(* (ConsumeLatestProgress, the reference system's bug 5).  Needs           *)
(* PrefixAgreementCore.tla beside it (the test copies it).  With one stage *)
(* there is no stage > 0, so the step holds; with two, stage 1 consumes    *)
(* acks stage 0 did not cut.  Expected: a counterexample in the case      *)
(* NStages = 2.                                                            *)
EXTENDS PrefixAgreementCore

THEOREM SeededBugBreaksStep ==
    (NStages \in 1..2 /\ NRanks = 2 /\ NBatches = 2 /\ BatchPages = 2 /\ ConsumeLatestProgress = TRUE)
        => (IndInv /\ Next => IndInv')
=============================================================================
