---------------------------- MODULE MinClock ----------------------------
(* A clock with Ticks ticks per hour; it refines HourClock under hr <- h.
   The mapping Skewed is not a refinement: hr moves back at the hour. *)
EXTENDS Naturals

CONSTANT Ticks

VARIABLES
    h,   \* the hour, 1..12
    m    \* ticks into the hour, 0..Ticks-1

vars == <<h, m>>

Init == h \in 1..12 /\ m = 0

ClockTick == IF m = Ticks - 1
             THEN m' = 0 /\ h' = IF h = 12 THEN 1 ELSE h + 1
             ELSE m' = m + 1 /\ UNCHANGED h

Spec == Init /\ [][ClockTick]_vars

Hour == INSTANCE HourClock WITH hr <- h
Skewed == INSTANCE HourClock WITH hr <- ((h + m - 1) % 12) + 1

RefinesHourClock == Hour!HC
RefinesSkewed == Skewed!HC
=============================================================================
