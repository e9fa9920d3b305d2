"""The fault simulation (simulation/, docs/simulation.md): a short seeded run on each
database, replay determinism, and proof that a planted bug makes it fail with its seed."""

from __future__ import annotations

import os

import pytest
from simulation import ops, run
from simulation.parts import postgres_reachable
from sqlalchemy import update

from largesse import db
from largesse.funding.models import funding_sources

SEED = int(os.environ.get("LARGESSE_SIM_SEED", "20261123"))
STEPS = int(os.environ.get("LARGESSE_SIM_STEPS", "200"))
REQUIRE_PG = os.environ.get("LARGESSE_REQUIRE_POSTGRES") in ("1", "true", "yes")


def _needs(backend: str) -> None:
    if backend == "postgresql" and not postgres_reachable():
        if REQUIRE_PG:
            pytest.fail("PostgreSQL is required (LARGESSE_REQUIRE_POSTGRES) but 127.0.0.1:5432 is unreachable")
        pytest.skip("PostgreSQL not reachable at 127.0.0.1:5432")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_short_run_keeps_every_invariant(backend):
    _needs(backend)
    lines: list[str] = []
    result = run.run(SEED, STEPS, backend, out=lines.append)
    print("\n".join(lines))
    assert result.status == 0, "\n".join(lines)
    summary = "\n".join(lines)
    # The run exercised what it is for: faults fired and the money paths ran.
    for what in ("fault: statement failed", "order placed", "order replayed", "insufficient funds",
                 "reward canceled", "reward redeemed"):
        assert what in summary, f"{what!r} never happened in {STEPS} steps:\n{summary}"


def test_one_seed_replays_the_same_run():
    first = run.run(SEED + 1, 40, "sqlite", out=lambda _line: None)
    second = run.run(SEED + 1, 40, "sqlite", out=lambda _line: None)
    assert first.status == second.status == 0
    assert first.digest == second.digest


def test_a_planted_bug_fails_the_run_with_its_seed(monkeypatch):
    """An operation that adds money to a balance without a ledger entry (the kind of bug a
    later change could bring) must stop the run at that step and say how to replay it."""

    def op_money_from_nowhere(sim) -> str:
        org = sim.model.orgs[0]
        with db.write(sim.engine) as conn:
            conn.execute(update(funding_sources).where(funding_sources.c.id == org.balance_id)
                         .values(available_cents=funding_sources.c.available_cents + 1))
        return "planted bug: one cent without a ledger entry"

    monkeypatch.setattr(ops, "OPERATIONS", [*ops.OPERATIONS, (op_money_from_nowhere, 20)])
    lines: list[str] = []
    result = run.run(7, 100, "sqlite", out=lines.append)
    output = "\n".join(lines)
    assert result.status == 1
    assert result.steps < 100
    assert "SIMULATION FAILED on sqlite: seed 7" in output
    assert "operation op_money_from_nowhere" in output
    assert "ledger verify" in output
    assert f"replay: make simulate SEED=7 STEPS={result.steps} DB=sqlite" in output
