---------------------------- MODULE Guards ----------------------------
(* Action-level constructs: a disjunctive guard, x' \in S followed by a test of x',
   UNCHANGED of a tuple, IF/CASE/LET around primed assignments. *)
EXTENDS Naturals
VARIABLES x, y
Init == x = 0 /\ y = 0
B1 == x < 2 /\ (x = 0 \/ x = 0 \/ y = 0) /\ x' = x + 1 /\ y' = y
B2 == x < 2 /\ x' \in {x, x + 1} /\ x' > x /\ UNCHANGED <<y>>
B3 == x = 2 /\ y < 2 /\ IF y = 0 THEN y' = 1 /\ x' = x ELSE (y' = 2 /\ UNCHANGED x)
B4 == y = 2 /\ x = 2 /\ CASE x = 2 -> x' = 3 /\ y' = 3 [] OTHER -> x' = 9 /\ y' = 9
B5 == x = 3 /\ LET z == x + 1 IN x' = z /\ y' = z
Next == B1 \/ B2 \/ B3 \/ B4 \/ B5
=============================================================================
