---------------------------- MODULE Philosophers ----------------------------
(* N philosophers each take the left fork, then the right, then put both down.
   All holding their left fork is a deadlock. *)
EXTENDS Integers

CONSTANT N

VARIABLES
    holder   \* holder[f]: the philosopher holding fork f, or -1

vars == <<holder>>
Phils == 0..(N - 1)
Left(p) == p
Right(p) == (p + 1) % N

Init == holder = [f \in Phils |-> -1]

PhilTakeLeft(p) == /\ holder[Left(p)] = -1
                   /\ holder[Right(p)] # p
                   /\ holder' = [holder EXCEPT ![Left(p)] = p]

PhilTakeRight(p) == /\ holder[Left(p)] = p
                    /\ holder[Right(p)] = -1
                    /\ holder' = [holder EXCEPT ![Right(p)] = p]

PhilPutDown(p) == /\ holder[Left(p)] = p
                  /\ holder[Right(p)] = p
                  /\ holder' = [holder EXCEPT ![Left(p)] = -1, ![Right(p)] = -1]

Next == \E p \in Phils : PhilTakeLeft(p) \/ PhilTakeRight(p) \/ PhilPutDown(p)
=============================================================================
