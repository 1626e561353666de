---------------------------- MODULE Ops ----------------------------
(* Operators shared by models that EXTEND this module. *)
EXTENDS Naturals, Sequences

Max(a, b) == IF a > b THEN a ELSE b
Sum(s) == LET f[i \in 0..Len(s)] == IF i = 0 THEN 0 ELSE f[i - 1] + s[i] IN f[Len(s)]
=============================================================================
