----------------------------- MODULE ProveConfig -----------------------------
(* With ProveConfig.cfg (--config) S is 3; without it S is any Nat >= 1.     *)
(* NoWrap holds for S = 3 only.  Also: a module without THEOREMs elsewhere.  *)
EXTENDS Naturals
CONSTANT S, Flag
ASSUME S \in Nat /\ S >= 1 /\ Flag \in BOOLEAN

THEOREM NoWrap == (S + 1) % S = 1 /\ S * 2 = 6
THEOREM FlagIsBool == Flag \/ ~Flag
=============================================================================
