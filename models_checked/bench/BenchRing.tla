--------------------------- MODULE BenchRing ---------------------------
(***************************************************************************)
(* The checker benchmark: N counters modulo M and a token passed around a *)
(* ring. Every assignment of counters and token position is reachable, so *)
(* the model has exactly N * M^N distinct states (40,000 for N=4, M=10).   *)
(***************************************************************************)
EXTENDS Naturals
CONSTANTS N, M
VARIABLES val,  \* val[i] is counter i, in 0..M-1
          tok   \* the rank holding the token
vars == <<val, tok>>
Ranks == 0..N-1
TypeOK == /\ val \in [Ranks -> 0..M-1]
          /\ tok \in Ranks
Init == /\ val = [i \in Ranks |-> 0]
        /\ tok = 0
RankStep(i) == /\ tok = i
               /\ val' = [val EXCEPT ![i] = (@ + 1) % M]
               /\ tok' = (i + 1) % N
RankPass(i) == /\ tok = i
               /\ tok' = (i + 1) % N
               /\ UNCHANGED val
RankBump(i) == /\ val[i] < M - 1
               /\ val' = [val EXCEPT ![i] = @ + 1]
               /\ UNCHANGED tok
Next == \E i \in Ranks : RankStep(i) \/ RankPass(i) \/ RankBump(i)
Spec == Init /\ [][Next]_vars
=============================================================================
