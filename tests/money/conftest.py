"""Shared helpers of the money-side tests (top-ups, invoices, currencies)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import delete

from largesse import db
from largesse.forex.models import forex_rates

# The webhook receiver and the quick-worker settings.
from tests.delivery.conftest import fast  # noqa: F401
from tests.webhooks.conftest import receiver  # noqa: F401


def cli_json(result) -> dict:
    return json.loads(result.stdout)


def concurrent_cli(database_url: str, tmp_path, *args: str, runs: int = 4,
                   commands: list[tuple[str, ...]] | None = None) -> list[tuple[int, str, str]]:
    """Start `runs` processes of `largesse *args` (or one per item of commands) at once;
    (returncode, stdout, stderr) of each."""
    env = {**os.environ, "LARGESSE_DATABASE_URL": database_url}
    largesse = str(Path(sys.executable).parent / "largesse")
    procs = [subprocess.Popen([largesse, *command], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for command in (commands or [args] * runs)]
    outputs = [p.communicate(timeout=120) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]


@pytest.fixture
def default_rates(engine):
    """Rates are one set for the whole database: a test that imports some puts the shipped
    default set back (an empty table) when it ends."""
    yield
    with db.write(engine) as conn:
        conn.execute(delete(forex_rates))


def ledger_problems(cli, org_id: str) -> list[dict]:
    """`largesse ledger verify` findings about this organization (other tests' organizations
    may carry deliberate inconsistencies)."""
    report = json.loads(cli("ledger", "verify", "--json", check=False).stdout)
    return [p for p in report["problems"] if p["organization_id"] == org_id]
