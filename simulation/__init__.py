"""A deterministic fault simulation of Largesse: `make simulate SEED=... STEPS=...` (docs/simulation.md).

One random.Random(seed) picks every operation and every fault; the real services run
in-process, single-threaded, on a real database (SQLite file or a throwaway PostgreSQL
database), a real SMTP server (aiosmtpd) and a real loopback webhook receiver, under a
virtual clock (timeutil.set_clock). After every step the invariants are checked.
"""
