---------------------------- MODULE Cycle ----------------------------
(* A counter mod K with a history of the last step taken. The VIEW hides the
   history, so the model has K distinct states instead of more. *)
EXTENDS Naturals

CONSTANT K

VARIABLES
    x,      \* the counter
    last    \* "none", "inc" or "wrap": the last step taken

Init == x = 0 /\ last = "none"
CycleInc == x < K - 1 /\ x' = x + 1 /\ last' = "inc"
CycleWrap == x = K - 1 /\ x' = 0 /\ last' = "wrap"
CycleSkip == x + 2 < K /\ x' = x + 2 /\ last' = "inc"
Next == CycleInc \/ CycleWrap \/ CycleSkip

OnlyX == x
=============================================================================
