---------------------------- MODULE TokenRing ----------------------------
(* A token circulates on a ring of N nodes; each node may hold it at most
   Rounds times before everyone's count is reset. *)
EXTENDS Naturals

CONSTANTS N, Rounds

VARIABLES
    tok,   \* the node holding the token
    cnt    \* cnt[i]: times node i has passed the token since the last reset

vars == <<tok, cnt>>
Nodes == 0..(N - 1)

TypeOK == tok \in Nodes /\ cnt \in [Nodes -> 0..Rounds]

Init == tok = 0 /\ cnt = [i \in Nodes |-> 0]

NodePass == /\ cnt[tok] < Rounds
            /\ tok' = (tok + 1) % N
            /\ cnt' = [cnt EXCEPT ![tok] = @ + 1]

RingReset == /\ \A i \in Nodes : cnt[i] = Rounds
             /\ cnt' = [i \in Nodes |-> 0]
             /\ UNCHANGED tok

Next == NodePass \/ RingReset

Spec == Init /\ [][Next]_vars /\ WF_vars(Next)
=============================================================================
