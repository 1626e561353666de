---------------------------- MODULE Override ----------------------------
(* Configuration substitutions: an operator constant Op(_) given by `Op <- Impl`,
   and a defined operator Step replaced by `Step <- DefStep` or `Step = 3`. *)
EXTENDS Naturals

CONSTANTS Op(_), Limit

VARIABLES
    x,   \* grows by Op(x) + Step until it passes Limit
    f    \* an arbitrary function, fixed from the initial state on

Impl(a) == a * 2
Step == 1
DefStep == 3

Init == x = 0 /\ f \in [{1, 2} -> {0, 1}]
OverrideStep == x < Limit /\ x' = Op(x) + Step /\ UNCHANGED f
Next == OverrideStep
=============================================================================
