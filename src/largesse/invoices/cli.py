"""`largesse invoices list|pay`: the operator's side of invoices. Registered by largesse.cli."""

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

invoices_app = typer.Typer(help="Invoices: mark them paid.", no_args_is_help=True)


@invoices_app.command("list")
def invoices_list(org: OrgFilterOption = None, limit: LimitOption = 100, as_json: JsonFlag = False):
    """Invoices of every status, newest first."""
    from largesse.invoices import service

    rows = operator_list(org, limit, service.list_all)
    data = {"invoices": [service.to_wire(r) | {"organization_id": r.organization_id} for r in rows]}
    emit(data, as_json, "\n".join(
        f"{r.id}  {r.organization_id}  {r.status:<8} "
        f"{amount_in(r.amount_cents, r.currency_code):>12} {r.currency_code}  "
        f"{r.created_at:%Y-%m-%d %H:%M:%S}  {r.po_number or ''}" for r in rows) or "no invoices")


@invoices_app.command("pay")
def invoices_pay(invoice_id: Annotated[str, typer.Argument(help="The invoice's ID")], as_json: JsonFlag = False):
    """Mark an OPEN invoice paid and credit its amount to the organization's balance in its
    currency (once: a second run credits nothing). A deleted invoice cannot be paid (exit 1)."""
    from largesse.invoices import service

    try:
        done = service.pay(open_engine(), invoice_id)
    except service.UnknownInvoice:
        fail(f"no invoice {invoice_id}")
    invoice = done.invoice
    data = {"paid": done.changed, "invoice": invoice, "available_cents": done.available_cents}
    if done.changed:
        code = invoice["currency_code"]
        emit(data, as_json, f"invoice {invoice_id} paid: credited {money_text(done.amount_cents, code)}; "
                            f"balance {money_text(done.available_cents, code)}")
    elif done.status == service.PAID:
        emit(data, as_json, f"invoice {invoice_id} was already paid: nothing credited")
    else:
        fail(f"invoice {invoice_id} is {done.status}: it cannot be paid")


def register(app: typer.Typer) -> None:
    app.add_typer(invoices_app, name="invoices")
