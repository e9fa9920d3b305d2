"""Helpers shared by every domain's operator commands (largesse.cli, delivery/cli.py, ...).

Domain CLIs import this module; it imports none of them, so there is no cycle back into
largesse.cli.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from largesse import db
from largesse.config import Settings

OrgOption = Annotated[str, typer.Option("--org", help="Organization ID")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
OrgFilterOption = Annotated[str | None, typer.Option("--org", help="Only this organization's")]
LimitOption = Annotated[int, typer.Option(help="How many (newest first)")]


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        fail(str(exc))


def open_engine(settings: Settings | None = None, *, prepare: bool = True):
    from largesse.bootstrap import prepare as prepare_db

    settings = settings or load_settings()
    engine = db.make_engine(settings.database_url)
    if prepare:
        prepare_db(engine)
    return engine


def fail(message: str, code: int = 1):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def emit(data: dict, as_json: bool, text: str) -> None:
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def operator_list(org: str | None, limit: int, list_all) -> list:
    """The rows of an operator's `list` command (invoices, top-ups): list_all(conn, org, limit=)
    for one organization, which must exist, or for all; limit kept within 1..1000."""
    with db.read(open_engine()) as conn:
        if org is not None:
            require_org(conn, org)
        return list_all(conn, org, limit=max(1, min(limit, 1000)))


def require_org(conn, org_id: str):
    from largesse.orgs import service as orgs

    row = orgs.get_org(conn, org_id)
    if row is None:
        fail(f"no organization {org_id}")
    return row
