----------------------------- MODULE PPSyncSeeded -----------------------------
(* The inductive step of spec/PPSync.tla's IndInv with the seeded bug on:   *)
(* stages > 0 apply their own leading ready count (BugLocalCount, the       *)
(* reference system's bug 5).  Needs PPSync.tla beside it (the test copies  *)
(* it).  With one stage there is no stage > 0, so the step holds; with two  *)
(* stage 1 applies what stage 0 never agreed.  Expected: a counterexample  *)
(* in the case NStages = 2.                                                *)
EXTENDS PPSync

THEOREM SeededBugBreaksStep ==
    (NStages \in 1..2 /\ NRanks = 2 /\ NTransfers = 2 /\ MaxChecks = 2 /\ BugLocalCount = TRUE)
        => (IndInv /\ Next => IndInv')
=============================================================================
