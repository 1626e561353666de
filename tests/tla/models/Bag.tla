---------------------------- MODULE Bag ----------------------------
(* Fill a sequence of up to Cap numbers from Vals; track the running maximum.
   EXTENDS a user module (Ops) for Max and Sum. *)
EXTENDS Ops

CONSTANTS Vals, Cap

VARIABLES
    s,     \* the numbers drawn so far
    hi     \* the largest number drawn, 0 before

Init == s = <<>> /\ hi = 0

BagDraw(v) == /\ Len(s) < Cap
              /\ s' = Append(s, v)
              /\ hi' = Max(hi, v)

BagDrop == /\ s # <<>>
           /\ s' = SubSeq(s, 1, Len(s) - 1)
           /\ hi' = IF Len(s) = 1 THEN 0 ELSE Max(hi, 0)

Next == (\E v \in Vals : BagDraw(v)) \/ BagDrop

HiIsBound == \A i \in 1..Len(s) : s[i] <= hi
SumBound == Sum(s) <= Cap * hi
=============================================================================
