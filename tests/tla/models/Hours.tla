---------------------------- MODULE Hours ----------------------------
(* An unnamed INSTANCE brings HourClock's definitions in, with hr <- hours. *)
VARIABLE hours
INSTANCE HourClock WITH hr <- hours
=============================================================================
