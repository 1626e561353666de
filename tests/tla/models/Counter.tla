---------------------------- MODULE Counter ----------------------------
(* A counter that is meant to only grow, but Reset takes it back to 0. *)
EXTENDS Naturals

VARIABLE x

Init == x = 0
CounterInc == x < 3 /\ x' = x + 1
CounterReset == x = 3 /\ x' = 0
Next == CounterInc \/ CounterReset
Spec == Init /\ [][Next]_x

Monotone == [][x' >= x]_x
=============================================================================
