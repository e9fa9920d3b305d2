"""`python -m simulation.run --seed S --steps N [--db sqlite|postgresql|both]` (make simulate).

Each step: one seeded operation is chosen, seeded faults are injected, the operation runs
against the real services, then every invariant is checked. At the end: the faults heal,
time passes until every job is due, the worker drains, and nothing may be stuck. A failure
prints the seed, the step, the operation and the command that replays it, and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass

from simulation import checks, ops
from simulation.harness import Simulation
from simulation.model import Violation
from simulation.parts import EPOCH, postgres_reachable

BACKENDS = ("sqlite", "postgresql")
_IDS = re.compile(r"\b[A-Z0-9]{14}\b")  # random ids differ between runs of one seed; nothing else does


@dataclass
class Result:
    status: int  # 0: every invariant held
    steps: int
    seconds: float
    digest: str  # of the step log without ids: equal for two runs of one seed


def inject_faults(sim, operation: str) -> list[str]:
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
        kill = operation == "op_worker" and rng.random() < 0.4
        sim.fault.arm(nth, kill=kill)
        notes.append(f"{'the worker dies at' if kill else 'failure of'} statement {nth} from now")
    if rng.random() < 0.05:
        sim.kill_next_send = True
        notes.append("the worker dies after its next SMTP send")
    return notes


def run(seed: int, steps: int, backend: str, *, out=print, trace=None, progress: int = 0) -> Result:
    """One run of `steps` steps on `backend`; prints a summary, or how to replay a failure.
    `trace` (a file) receives every step's line; every `progress` steps a progress line is printed."""
    functions = {f.__name__: f for f, _ in ops.OPERATIONS}
    names, weights = list(functions), [w for _, w in ops.OPERATIONS]
    history: deque[str] = deque(maxlen=15)
    digest = hashlib.sha256()
    started = time.monotonic()
    sim = Simulation(seed, backend)
    where, operation = "setup", "-"
    try:
        for step in range(1, steps + 1):
            sim.step = step
            where = f"step {step}"
            sim.clock.advance(sim.rng.uniform(0.05, 3))
            operation = sim.rng.choices(names, weights)[0]
            faults = inject_faults(sim, operation)
            mode = sim.receiver.state.mode
            if sim.hang_once:
                sim.receiver.set_mode("hang")
            try:
                outcome = functions[operation](sim)
            finally:
                sim.fault.disarm()
                if sim.hang_once:
                    sim.hang_once = False
                    sim.receiver.set_mode(mode)
            line = f"{step:>6} {sim.clock.now:%Y-%m-%d %H:%M:%S} " + (f"[{'; '.join(faults)}] " if faults else "") \
                + outcome
            history.append(line)
            if trace is not None:
                trace.write(line + "\n")
            digest.update(_IDS.sub("ID", line).encode())
            checks.check_step(sim)
            if progress and step % progress == 0:
                elapsed = time.monotonic() - started
                out(f"  step {step}: {elapsed:.0f} s ({step / elapsed:.1f} steps/s), {len(sim.model.orders)} orders, "
                    f"{len(sim.model.rewards)} rewards")
        where, operation = "settling (end of run)", "settle"
        rounds = sim.settle()
        summary = checks.check_final(sim)
    except Exception as exc:
        out(f"\nSIMULATION FAILED on {backend}: seed {seed}, {where}, operation {operation}")
        out(f"  {type(exc).__name__}: {exc}")
        if not isinstance(exc, Violation):
            out(traceback.format_exc())
        out("  last steps:")
        for line in history:
            out(f"    {line}")
        out(f"  replay: make simulate SEED={seed} STEPS={sim.step if sim.step < steps else steps} DB={backend}")
        return Result(1, sim.step, time.monotonic() - started, digest.hexdigest())
    finally:
        sim.close()
    elapsed = time.monotonic() - started
    out(f"{backend}: seed {seed}, {steps} steps in {elapsed:.1f} s ({steps / elapsed:.1f} steps/s), "
        f"{sim.fault.statements} SQL statements, virtual time {sim.clock.now - EPOCH}, settled in {rounds} rounds")
    for line in summary:
        out(f"  {line}")
    out("  " + ", ".join(f"{k} {v}" for k, v in sorted(sim.counts.items())))
    for line in sim.observations[:3]:
        out(f"  observation: {line}")
    out(f"  trace digest {digest.hexdigest()[:16]} (the same for every run of this seed)")
    return Result(0, steps, elapsed, digest.hexdigest())


def _print(line: str) -> None:
    print(line, flush=True)


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt  # SIGTERM: unwind, so the run's database and servers are cleaned up


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(prog="python -m simulation.run", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random seed (printed)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--db", choices=(*BACKENDS, "both"), default="both")
    parser.add_argument("--trace", metavar="FILE", help="write every step's line to FILE.<db>")
    parser.add_argument("--progress", type=int, default=500, metavar="N", help="a progress line every N steps")
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
        print(f"{backend}: seed {seed}, {args.steps} steps ...", flush=True)
        if args.trace:
            with open(f"{args.trace}.{backend}", "w") as trace:
                status |= run(seed, args.steps, backend, out=_print, trace=trace, progress=args.progress).status
        else:
            status |= run(seed, args.steps, backend, out=_print, progress=args.progress).status
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
