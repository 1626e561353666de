---------------------------- MODULE Grid ----------------------------
(* Two counters that step up or down in 0..3; the ACTION_CONSTRAINT keeps only
   steps that do not decrease the sum, the CONSTRAINT keeps a + b <= 4. *)
EXTENDS Integers

VARIABLES a, b

Init == a = 0 /\ b \in {0, 1}
GridMoveA == \E d \in {-1, 1} : a + d \in 0..3 /\ a' = a + d /\ UNCHANGED b
GridMoveB == \E d \in {-1, 1} : b + d \in 0..3 /\ b' = b + d /\ UNCHANGED a
Next == GridMoveA \/ GridMoveB

SumBound == a + b <= 4
NoDecrease == a' + b' >= a + b
=============================================================================
