---------------------------- MODULE Minutes ----------------------------
(* Init and Next use a named instance's operators (H!HCini, H!HCnxt): the
   substitution hr <- h applies under priming too. *)
EXTENDS Naturals
VARIABLES h, m
H == INSTANCE HourClock WITH hr <- h
Init == H!HCini /\ m = 0
Next == \/ m = 1 /\ H!HCnxt /\ m' = 0
        \/ m = 0 /\ m' = 1 /\ UNCHANGED h
Spec == Init /\ [][Next]_<<h, m>>
Refines == H!HC
=============================================================================
