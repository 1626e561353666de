"""The pure protocol core: decisions without threads, sockets, clocks or torch.

vocabulary (fixed action names), digest ([x, -x] agreement pairs), cp_layout and cp_alloc
(owner/local address arithmetic, rotation-preserving allocator), pp_sync and pp_sync_model
(what to reduce and pop; an exhaustively explorable model), prefix_agreement (acks, agreed
prefix, stop policies), layer_pipeline (gather/attention guard), config_agreement,
events (the listener hook).
"""
