"""`largesse topups list|credit|reject`: the operator's side of top-ups. Registered by largesse.cli."""

from __future__ import annotations

from typing import Annotated

import typer

from largesse.cli_common import (
    JsonFlag,
    LimitOption,
    OrgFilterOption,
    emit,
    fail,
    money_text,
    open_engine,
    operator_list,
)
from largesse.money import amount_in

topups_app = typer.Typer(help="Top-up requests: credit or reject them.", no_args_is_help=True)


@topups_app.command("list")
def topups_list(org: OrgFilterOption = None, limit: LimitOption = 100, as_json: JsonFlag = False):
    """Top-up requests, newest first."""
    from largesse.topups import service

    rows = operator_list(org, limit, service.list_all)
    data = {"topups": [service.to_wire(r) | {"organization_id": r.organization_id} for r in rows]}
    emit(data, as_json, "\n".join(
        f"{r.id}  {r.organization_id}  {r.status:<14} "
        f"{amount_in(r.amount_cents, r.currency_code):>12} {r.currency_code}  "
        f"{r.created_at:%Y-%m-%d %H:%M:%S}  key={r.idempotency_key}" for r in rows) or "no top-ups")


@topups_app.command("credit")
def topups_credit(topup_id: Annotated[str, typer.Argument(help="The top-up's ID")], as_json: JsonFlag = False):
    """Credit a `created` top-up to its balance (once: a second run credits nothing)."""
    from largesse.topups import service

    try:
        done = service.credit(open_engine(), topup_id)
    except service.UnknownTopup:
        fail(f"no top-up {topup_id}")
    topup = done.topup
    data = {"credited": done.changed, "topup": topup, "available_cents": done.available_cents}
    if done.changed:
        code = topup["currency_code"]
        emit(data, as_json, f"credited top-up {topup_id}: {money_text(done.amount_cents, code)}; "
                            f"balance {money_text(done.available_cents, code)}")
    elif done.status == service.CREDITED:
        emit(data, as_json, f"top-up {topup_id} was already credited: nothing credited")
    else:
        fail(f"top-up {topup_id} is {done.status}: it cannot be credited")


@topups_app.command("reject")
def topups_reject(topup_id: Annotated[str, typer.Argument(help="The top-up's ID")],
                  reason: Annotated[str | None, typer.Option(help="Why (kept on the top-up)")] = None,
                  as_json: JsonFlag = False):
    """Reject a `created` top-up: nothing is credited."""
    from largesse.topups import service

    if reason is not None and len(reason) > 500:
        fail("--reason must be at most 500 characters")
    try:
        done = service.reject(open_engine(), topup_id, reason)
    except service.UnknownTopup:
        fail(f"no top-up {topup_id}")
    if not done.changed:
        fail(f"top-up {topup_id} is {done.status}: only a created top-up can be rejected")
    emit({"rejected": True, "topup": done.topup}, as_json, f"rejected top-up {topup_id}")


def register(app: typer.Typer) -> None:
    app.add_typer(topups_app, name="topups")
