---------------------------- MODULE Unbounded ----------------------------
(* Two unbounded counters, cut by a CONSTRAINT. A state whose successors all
   fall outside the constraint is not a deadlock: it has successors. *)
EXTENDS Naturals

VARIABLES x, y

Init == x = 0 /\ y = 0
IncX == x' = x + 1 /\ UNCHANGED y
IncY == y' = y + 1 /\ UNCHANGED x
Next == IncX \/ IncY

SmallSum == x + y <= 3
=============================================================================
