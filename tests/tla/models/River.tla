---------------------------- MODULE River ----------------------------
(* Missionaries and cannibals: 3 of each and a boat for two cross a river.
   Unsolved is violated by the shortest crossing plan (the puzzle's answer). *)
EXTENDS Integers

VARIABLES
    m,      \* missionaries on the left bank
    c,      \* cannibals on the left bank
    boat    \* "left" or "right"

Safe(mm, cc) == (mm = 0 \/ mm >= cc) /\ (3 - mm = 0 \/ 3 - mm >= 3 - cc)

Loads == {<<1, 0>>, <<2, 0>>, <<0, 1>>, <<0, 2>>, <<1, 1>>}

Init == m = 3 /\ c = 3 /\ boat = "left"

BoatCross(load) ==
    LET dm == IF boat = "left" THEN -load[1] ELSE load[1]
        dc == IF boat = "left" THEN -load[2] ELSE load[2]
    IN /\ m + dm \in 0..3
       /\ c + dc \in 0..3
       /\ Safe(m + dm, c + dc)
       /\ m' = m + dm
       /\ c' = c + dc
       /\ boat' = IF boat = "left" THEN "right" ELSE "left"

Next == \E load \in Loads : BoatCross(load)

Unsolved == ~(m = 0 /\ c = 0)
=============================================================================
