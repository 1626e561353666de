------------------------------ MODULE ProveSets ------------------------------
(* Finite sets of integers as state (SUBSET), set maps, CHOOSE of a minimum *)
(* and constants pinned by the hypothesis (one obligation per value).       *)
(* Suffix: _ok proved, _cex counterexample.                                 *)
EXTENDS Integers
CONSTANTS N, K
Slots == 1..K
None == -1
VARIABLES got, next
TypeOK ==
    /\ got \in [0..(N - 1) -> SUBSET Slots]
    /\ next \in [0..(N - 1) -> 0..K]
Min(S) == CHOOSE m \in S : \A x \in S : m <= x
(* the first slot rank n still misses, or K + 1 *)
Gap(n) == Min({x \in 1..(K + 1) : x \notin got[n] \/ x = K + 1})
Get(n, x) ==
    /\ x \in Slots
    /\ got' = [got EXCEPT ![n] = @ \cup {x}]
    /\ UNCHANGED next
Advance(n) ==
    /\ next' = [next EXCEPT ![n] = Gap(n) - 1]
    /\ UNCHANGED got
AdvanceTooFar(n) ==
    /\ next' = [next EXCEPT ![n] = Gap(n)]
    /\ UNCHANGED got
Next == \E n \in 0..(N - 1) : Advance(n) \/ \E x \in Slots : Get(n, x)
NextBad == \E n \in 0..(N - 1) : AdvanceTooFar(n)
Inv == TypeOK /\ \A n \in 0..(N - 1) : \A x \in 1..next[n] : x \in got[n]
THEOREM Step_ok == (N \in 1..3 /\ K = 3) => (Inv /\ Next => Inv')
THEOREM StepBad_cex == (N \in 1..3 /\ K = 3) => (Inv /\ NextBad => Inv')
THEOREM MinOfMap_ok == (N = 2 /\ K = 3) =>
    \A a, b \in 0..5 : Min({IF n = 0 THEN a ELSE b : n \in 0..1}) = IF a < b THEN a ELSE b
THEOREM UnionEq_ok == (N = 1 /\ K = 3) => (Inv => got[0] \cup {1} = {1} \cup got[0])
THEOREM Subset_cex == (N = 1 /\ K = 3) => (Inv => got[0] \subseteq 1..2)
=============================================================================
