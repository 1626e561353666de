---------------------------- MODULE DieHard ----------------------------
(* The water-jug puzzle from Die Hard 3: jugs of 3 and 5 gallons. *)
EXTENDS Naturals

VARIABLES
    small,   \* gallons in the 3-gallon jug
    big      \* gallons in the 5-gallon jug

vars == <<small, big>>

TypeOK == small \in 0..3 /\ big \in 0..5

Init == small = 0 /\ big = 0

FillSmall == small' = 3 /\ big' = big
FillBig == big' = 5 /\ small' = small
EmptySmall == small' = 0 /\ big' = big
EmptyBig == big' = 0 /\ small' = small

Min(m, n) == IF m < n THEN m ELSE n

SmallToBig == /\ big' = Min(big + small, 5)
              /\ small' = small - (big' - big)

BigToSmall == /\ small' = Min(big + small, 3)
              /\ big' = big - (small' - small)

Next == \/ FillSmall \/ FillBig
        \/ EmptySmall \/ EmptyBig
        \/ SmallToBig \/ BigToSmall

Spec == Init /\ [][Next]_vars

NotSolved == big # 4
=============================================================================
