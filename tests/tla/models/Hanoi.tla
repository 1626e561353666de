---------------------------- MODULE Hanoi ----------------------------
(* Towers of Hanoi; each tower is a sequence of disks, top first.
   Unsolved is violated by the shortest solution: 2^D - 1 moves. *)
EXTENDS Naturals, Sequences

CONSTANT D

VARIABLE towers   \* towers[t]: the disks on tower t, smallest (top) first

Init == towers = << [i \in 1..D |-> i], <<>>, <<>> >>

CanMove(from, to) == /\ towers[from] # <<>>
                     /\ IF towers[to] = <<>> THEN TRUE
                        ELSE Head(towers[from]) < Head(towers[to])

HanoiMove(from, to) ==
    /\ from # to
    /\ CanMove(from, to)
    /\ towers' = [towers EXCEPT ![from] = Tail(@),
                                ![to] = <<Head(towers[from])>> \o @]

Next == \E from, to \in 1..3 : HanoiMove(from, to)

Unsolved == Len(towers[3]) < D
=============================================================================
