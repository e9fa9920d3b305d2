"""`largesse org approvals` (an organization's approval policy) and `largesse orders pending|approve|reject`
(an operator deciding for a member). Registered by largesse.cli (register(app, org_app))."""

from __future__ import annotations

from typing import Annotated

import typer

from largesse import db
from largesse.cli_common import JsonFlag, OrgOption, emit, fail, open_engine, require_org
from largesse.money import amount_in

orders_app = typer.Typer(help="Orders waiting for approval.", no_args_is_help=True)


def _policy_text(org: str, policy, currency_code: str) -> str:
    mode = {"off": "no order needs approval", "api": "orders placed through the API need approval",
            "all": "every order needs approval"}.get(policy.mode)
    if mode is None:
        mode = (f"orders above {amount_in(policy.above_cents, currency_code)} {currency_code} need approval "
                "(converted for a balance in another currency)")
    api = "API keys may approve and reject" if policy.api_allowed else "API keys may not approve or reject (403)"
    return f"approvals of {org}: {mode}; {api}"


def org_approvals(
    org: OrgOption,
    mode: Annotated[str | None, typer.Option("--mode", help="off | api | all | above")] = None,
    above: Annotated[str | None, typer.Option("--above", help="With --mode above: totals above it, e.g. 100.00")]
    = None,
    api_approval: Annotated[bool | None, typer.Option("--allow-api-approval/--no-api-approval",
                                                      help="Whether API keys may approve or reject")] = None,
    as_json: JsonFlag = False,
):
    """Show or set which new orders wait as PENDING APPROVAL, and who may decide (docs/approvals.md)."""
    from largesse.money import MoneyError, decimals_for, parse_amount_text
    from largesse.orders import approvals

    if above is not None:
        if mode not in (None, "above"):
            fail("--above goes with --mode above")
        mode = "above"
    above_cents = None
    with db.write(open_engine()) as conn:
        row = require_org(conn, org)
        if above is not None:  # in the organization's currency and its decimals (whole yen for JPY)
            try:
                above_cents = parse_amount_text(above, decimals=decimals_for(row.currency_code), zero=True)
            except MoneyError as exc:
                fail(f"--above {exc}")
        policy = approvals.get_policy(conn, org)
        if mode is not None or api_approval is not None:
            try:
                policy = approvals.set_policy(
                    conn, org, mode=mode or policy.mode,
                    above_cents=above_cents if above_cents is not None else policy.above_cents,
                    api_allowed=api_approval)
            except ValueError as exc:
                fail(str(exc))
    emit({"organization_id": org, "mode": policy.mode,
          "above": amount_in(policy.above_cents, row.currency_code) if policy.above_cents is not None else None,
          "currency_code": row.currency_code,
          "api_approval_allowed": policy.api_allowed}, as_json, _policy_text(org, policy, row.currency_code))


@orders_app.command("pending")
def orders_pending(org: OrgOption, as_json: JsonFlag = False):
    """Orders of the organization waiting for approval, oldest first."""
    from largesse.orders import approvals

    with db.read(open_engine()) as conn:
        require_org(conn, org)
        rows = approvals.list_pending(conn, org, limit=500)
    data = [{"id": r.id, "external_id": r.external_id, "total": amount_in(r.total_cents, r.currency_code),
             "currency_code": r.currency_code, "created_at": str(r.created_at)} for r in rows]
    emit({"orders": data}, as_json, "\n".join(
        f"{d['id']}  {d['total']} {d['currency_code']}  {d['created_at']}  {d['external_id'] or ''}" for d in data)
        or "no orders waiting for approval")


def _decide(verb: str, org: str, order_id: str, member: str, as_json: bool) -> None:
    from largesse.errors import ApiError
    from largesse.orders import approvals
    from largesse.orgs import service as orgs

    engine = open_engine()
    with db.read(engine) as conn:
        require_org(conn, org)
        member_id = orgs.member_id_for(conn, org, member)  # its ID or address (`members list` shows both)
        if member_id is None:
            fail(f"no member {member} in organization {org} (give a member's ID or address: `largesse members list`)")
    decide = approvals.approve_order if verb == "approve" else approvals.reject_order
    try:
        order = decide(engine, org=org, order_id=order_id, by=approvals.Decider(member_id=member_id), via_api=False)
    except ApiError as exc:
        fail(exc.message)
    emit({"order": order}, as_json, f"order {order['id']}: {order['status']}")


@orders_app.command("approve")
def orders_approve(order_id: Annotated[str, typer.Argument(help="The order's ID")], org: OrgOption,
                   member: Annotated[str, typer.Option("--member", help="ID or address of the member who approves")],
                   as_json: JsonFlag = False):
    """Approve a PENDING APPROVAL order on behalf of a member: it is delivered."""
    _decide("approve", org, order_id, member, as_json)


@orders_app.command("reject")
def orders_reject(order_id: Annotated[str, typer.Argument(help="The order's ID")], org: OrgOption,
                  member: Annotated[str, typer.Option("--member", help="ID or address of the member who rejects")],
                  as_json: JsonFlag = False):
    """Reject a PENDING APPROVAL order on behalf of a member: canceled, its total refunded."""
    _decide("reject", org, order_id, member, as_json)


def register(app: typer.Typer, org_app: typer.Typer) -> None:
    org_app.command("approvals")(org_approvals)
    app.add_typer(orders_app, name="orders")
