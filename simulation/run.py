"""`python -m simulation.run --seed S --steps N [--db sqlite|postgresql|both]` (make simulate).

Each step: maybe inject faults (seeded), perform one seeded operation against the real
services, then check every invariant. At the end: heal the faults, let time pass until every
job is due, drain, and check that nothing is stuck. A failure prints the seed, the step, the
operation and the command that replays it, and exits 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections import deque

from simulation import checks, ops
from simulation.harness import Simulation
from simulation.model import Violation
from simulation.parts import postgres_reachable

BACKENDS = ("sqlite", "postgresql")


def inject_faults(sim) -> list[str]:
    """Faults for this step, all drawn from the seeded generator (some persist until changed)."""
    rng = sim.rng
    notes = []
    if rng.random() < 0.05:
        mode = rng.choices(["accept", "tempfail", "reject"], [6, 3, 1])[0]
        sim.smtp.set_mode(mode)
        notes.append(f"SMTP server: {mode}")
    if rng.random() < 0.03:
        mode = rng.choices(["ok", "error"], [2, 1])[0]
        sim.receiver.set_mode(mode)
        notes.append(f"webhook receiver: {mode}")
    if rng.random() < 0.03:  # for this step only: each hung POST costs the sender's whole deadline
        sim.hang_once = True
        notes.append("webhook receiver hangs")
    if rng.random() < 0.01:
        days = rng.randint(1, 6)
        sim.clock.advance(days * 86400 + rng.uniform(0, 3600))
        sim.count("fault: clock jump")
        notes.append(f"clock jumps {days} days")
    if rng.random() < 0.08:
        nth = rng.randint(1, 12)
        sim.fault.arm(nth)
        notes.append(f"statement {nth} from now fails")
    if rng.random() < 0.05:
        sim.kill_next_send = True
        notes.append("the worker dies after its next SMTP send")
    return notes


def run(seed: int, steps: int, backend: str, *, out=print) -> int:
    """One run; 0 when every invariant held, 1 otherwise (after printing how to replay it)."""
    functions, weights = zip(*ops.OPERATIONS, strict=True)
    history: deque[str] = deque(maxlen=15)
    started = time.monotonic()
    sim = Simulation(seed, backend)
    where, operation = "setup", "-"
    try:
        for step in range(1, steps + 1):
            sim.step = step
            where = f"step {step}"
            sim.clock.advance(sim.rng.uniform(0.05, 3))
            faults = inject_faults(sim)
            operation = sim.rng.choices(functions, weights)[0].__name__
            mode = sim.receiver.state.mode
            if sim.hang_once:
                sim.receiver.set_mode("hang")
            try:
                outcome = getattr(ops, operation)(sim)
            finally:
                sim.fault.disarm()
                if sim.hang_once:
                    sim.hang_once = False
                    sim.receiver.set_mode(mode)
            history.append(f"{step:>6} {sim.clock.now:%Y-%m-%d %H:%M:%S} "
                           + (f"[{'; '.join(faults)}] " if faults else "") + outcome)
            checks.check_step(sim)
        where, operation = "settling (end of run)", "settle"
        rounds = sim.settle()
        summary = checks.check_final(sim)
    except (Violation, Exception) as exc:
        out(f"\nSIMULATION FAILED on {backend}: seed {seed}, {where}, operation {operation}")
        out(f"  {type(exc).__name__}: {exc}")
        if not isinstance(exc, Violation):
            out(traceback.format_exc())
        out("  last steps:")
        for line in history:
            out(f"    {line}")
        replay_steps = sim.step if where.startswith("step") else steps
        out(f"  replay: make simulate SEED={seed} STEPS={replay_steps} DB={backend}")
        return 1
    finally:
        sim.close()
    elapsed = time.monotonic() - started
    out(f"{backend}: seed {seed}, {steps} steps in {elapsed:.1f} s ({steps / elapsed:.0f} steps/s), "
        f"{sim.fault.statements} SQL statements, virtual time {sim.clock.now - ops_epoch()}, settled in {rounds} "
        "rounds")
    for line in summary:
        out(f"  {line}")
    out("  " + ", ".join(f"{k} {v}" for k, v in sorted(sim.counts.items())))
    return 0


def ops_epoch():
    from simulation.parts import EPOCH

    return EPOCH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.run", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random seed (printed)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--db", choices=(*BACKENDS, "both"), default="both")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**9)
    backends = BACKENDS if args.db == "both" else (args.db,)
    status = 0
    for backend in backends:
        if backend == "postgresql" and not postgres_reachable():
            print("postgresql: not reachable at 127.0.0.1:5432, skipped")
            if args.db == "postgresql":
                return 2
            continue
        status |= run(seed, args.steps, backend)
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
