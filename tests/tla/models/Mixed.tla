---------------------------- MODULE Mixed ----------------------------
(* A grab bag of action-level forms: a disjunctive Init with a duplicate initial
   state, reading x' after assigning it, s' \in SUBSET S filtered by a test of s',
   an explicit stuttering action, and properties mixing init/always/action parts. *)
EXTENDS Naturals, FiniteSets, TLC

CONSTANT Procs

VARIABLES
    x,   \* 1..3
    y,   \* always x + 1
    s,   \* at most one picked process
    r    \* r[p] \in 0..1: bumps per process

vars == <<x, y, s, r>>

Init == \/ x = 1 /\ y = x + 1 /\ s = {} /\ r = [p \in Procs |-> 0]
        \/ x = 1 /\ y = 2 /\ s = {} /\ r = [p \in Procs |-> 0]

MixGrow == x < 3 /\ x' = x + 1 /\ y' = x' + 1 /\ UNCHANGED <<s, r>>
MixPick == s' \in SUBSET Procs /\ Cardinality(s') = 1 /\ UNCHANGED <<x, y, r>>
MixBump(p) == r[p] < 1 /\ r' = [r EXCEPT ![p] = @ + 1] /\ UNCHANGED <<x, y, s>>
MixStutter == UNCHANGED vars

Next == MixGrow \/ MixPick \/ (\E p \in Procs : MixBump(p)) \/ MixStutter

Spec == Init /\ [][Next]_vars

Inv == y = x + 1
Combined == (x = 1) /\ [](y > x) /\ [][x' >= x]_x
Eventually == <>(x = 3) /\ []Inv
StartsAtTwo == x = 2
Perms == Permutations(Procs)
=============================================================================
