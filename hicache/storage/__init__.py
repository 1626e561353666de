"""Storage tier: page stores behind one interface (base.py), their keys and guards.

keys.py      chained SHA-256 page keys (the one derivation for exists/get/set)
envelope.py  the stored form of a page: header + payload, verified on every read
file_store   the embedded default: one file per page in a sharded directory
mooncake_store / mooncake_server   Mooncake Store client, and a loopback master for tests
faulty.py    failure injection for tests;  safe.py: failures -> counted misses
"""
