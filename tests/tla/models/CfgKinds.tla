---------------------------- MODULE CfgKinds ----------------------------
(* Exercises each kind of .cfg constant: integer, string, boolean, model value,
   a set of model values, a set of strings, and an override `Limit <- SmallLimit`. *)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS Start, Label, Enabled, Nil, Workers, Colors, Limit

VARIABLES
    n,       \* a counter from Start up to Limit
    owner,   \* the worker that did the last step, Nil before
    color    \* a color picked at each step

SmallLimit == Start + Cardinality(Workers)

Init == n = Start /\ owner = Nil /\ color \in Colors

WorkerStep(w) == /\ Enabled
                 /\ n < Limit
                 /\ n' = n + 1
                 /\ owner' = w
                 /\ color' \in Colors

Next == \E w \in Workers : WorkerStep(w)

TypeOK == /\ n \in Start..Limit
          /\ owner \in Workers \cup {Nil}
          /\ color \in Colors
          /\ Label = "cfg"

\* the POSTCONDITION: constant-level, read once after the search
SawAll == TLCGet("stats").distinct = 10 /\ TLCGet("stats").generated = 26
=============================================================================
