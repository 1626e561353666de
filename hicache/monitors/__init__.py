"""Runtime monitors generated from the TLA+ specs (issue 6; docs/monitors.md).

  codegen     spec -> Python source (`hicache gen`), runtime helpers in rt
  generated/  one committed module per spec (do not edit; regenerate)
  runtime     Monitor, VerifyConfig/Mode, ProtocolViolation, ITF traces
  maps/       refinement maps: runtime state -> spec variables
  digest      cross-rank agreement of monitored state at cache checks
  faults, workload, zoo   the bug zoo (`hicache bugzoo`)
"""
