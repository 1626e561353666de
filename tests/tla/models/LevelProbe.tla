---------------------------- MODULE LevelProbe ----------------------------
(* TLCGet("level") is the level of the state it is evaluated in: in Next, the
   current state's level; in an invariant, the level of the checked state. *)
EXTENDS Naturals, TLC

VARIABLES
    step,   \* the number of steps taken
    lv      \* TLCGet("level") as read by the step that produced this state

Init == step = 0 /\ lv = 0
ProbeStep == step < 3 /\ step' = step + 1 /\ lv' = TLCGet("level")
Next == ProbeStep

LvInNext == step = 0 \/ lv = step
LvInInvariant == TLCGet("level") = step + 1
=============================================================================
