---------------------------- MODULE Fifo ----------------------------
(* A FIFO channel: a sender appends messages, a receiver takes the head.
   The queue is unbounded; the model bounds it with a CONSTRAINT. *)
EXTENDS Naturals, Sequences

CONSTANTS Msgs, NoMsg, MaxLen

VARIABLES
    q,       \* the channel contents, oldest first
    last     \* the last message received, NoMsg before the first

vars == <<q, last>>

TypeOK == q \in Seq(Msgs) /\ last \in Msgs \cup {NoMsg}

Init == q = <<>> /\ last = NoMsg

SenderSend(m) == q' = Append(q, m) /\ UNCHANGED last

ReceiverRecv == /\ q # <<>>
                /\ last' = Head(q)
                /\ q' = Tail(q)

Next == (\E m \in Msgs : SenderSend(m)) \/ ReceiverRecv

Bounded == Len(q) <= MaxLen
=============================================================================
