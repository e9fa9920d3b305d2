"""Invoices: money an organization promises to pay, credited when the operator marks it paid.

OPEN -> PAID (`largesse invoices pay ID`: the balance in the invoice's currency is credited
once, paid_at set) or OPEN -> DELETED (DELETE /invoices/{id}; still readable by ID, left out
of the list). Each transition is one conditional UPDATE from OPEN, so a pay and a delete, or
two pays, racing each other have exactly one winner; the ledger's unique (organization_id,
reference) index, with reference `invoice:<id>`, is the second lock: one credit per invoice.

Refusals (docs/funding.md): deleting a PAID invoice is a 409; paying a DELETED one is refused
by the CLI (exit 1); deleting a DELETED invoice again returns it unchanged (200).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, and_, bindparam, select, update
from sqlalchemy.exc import IntegrityError

from largesse import db, paging
from largesse.errors import BadRequest, Conflict
from largesse.funding import service as funding
from largesse.ids import new_id
from largesse.invoices.models import invoices
from largesse.money import MoneyError, decimals_for, to_cents
from largesse.money import to_wire as amount_to_wire
from largesse.orgs.models import organizations
from largesse.timeutil import iso, utcnow
from largesse.webhooks import service as webhooks

OPEN, PAID, DELETED = "OPEN", "PAID", "DELETED"
CURRENCIES = funding.BALANCE_CURRENCIES  # InvoiceCurrency (API.md §5): what an invoice may be in
LEDGER_KIND = "invoice_payment"
MAX_INVOICE_CENTS = 10**11


def reference(invoice_id: str) -> str:
    return f"invoice:{invoice_id}"


def create(conn: Connection, *, org: str, amount, currency_code: str | None, currency: str | None,
           po_number: str | None, memo: str | None) -> dict:
    """A new OPEN invoice; its currency defaults to the organization's."""
    codes = {c.strip().upper() for c in (currency_code, currency) if c is not None}
    if len(codes) > 1:
        raise BadRequest("currency_code and currency (deprecated) disagree",
                         {"currency_code": ["does not match currency"]})
    given = bool(codes)
    code = codes.pop() if codes else conn.execute(
        select(organizations.c.currency_code).where(organizations.c.id == org)).scalar_one()
    if code not in CURRENCIES:
        allowed = f"must be one of {', '.join(CURRENCIES)}"
        if not given:  # the organization's own currency, which the caller did not send
            why = f"is required: the organization's currency, {code}, cannot be invoiced ({allowed})"
            raise BadRequest(f"currency_code {why}", {"currency_code": [why]})
        key = "currency_code" if currency_code is not None else "currency"
        raise BadRequest(f"{key} {allowed}", {key: [allowed]})
    try:
        cents = to_cents(amount, decimals=decimals_for(code))
    except MoneyError as exc:
        raise BadRequest(f"amount {exc}", {"amount": [str(exc)]}) from None
    if cents <= 0:
        raise BadRequest("amount must be greater than 0", {"amount": ["must be greater than 0"]})
    if cents > MAX_INVOICE_CENTS:
        raise BadRequest("amount is too large", {"amount": ["is too large"]})
    invoice_id = new_id()
    conn.execute(invoices.insert().values(
        id=invoice_id, organization_id=org, amount_cents=cents, currency_code=code, po_number=po_number, memo=memo,
        status=OPEN, created_at=utcnow()))
    webhooks.emit(conn, org, [("INVOICES.CREATED", invoice_id)])
    return to_wire(_get(conn, org, invoice_id))


def _get(conn: Connection, org: str, invoice_id: str):
    return db.owned_or_404(conn, invoices, org, invoice_id, "Invoice")


def get(conn: Connection, org: str, invoice_id: str) -> dict:
    return to_wire(_get(conn, org, invoice_id))


def page(conn: Connection, org: str, *, offset: int, limit: int) -> tuple[list[dict], int]:
    """Newest first, deleted ones left out; total_count bounded as every list counts
    (paging.bounded_count). A walk of ix_invoices_org_created_id that stops after offset +
    limit invoices (db.index_walks: whatever the planner knows)."""
    rows, total = _LIST.page(conn, {"org": org}, offset=offset, limit=limit)
    return [to_wire(r) for r in rows], total


_LIST = paging.Listing(invoices, and_(invoices.c.organization_id == bindparam("org"), invoices.c.status != DELETED),
                       {}, order_by=(invoices.c.created_at.desc(), invoices.c.id.desc()))


def delete(conn: Connection, org: str, invoice_id: str) -> dict:
    row = _get(conn, org, invoice_id)
    changed = conn.execute(update(invoices).where(invoices.c.id == row.id, invoices.c.status == OPEN)
                           .values(status=DELETED, deleted_at=utcnow()).returning(*invoices.c)).first()
    if changed is not None:
        webhooks.emit(conn, org, [("INVOICES.DELETED", invoice_id)])
        return to_wire(changed)
    current = _get(conn, org, invoice_id)
    if current.status == DELETED:
        return to_wire(current)
    raise Conflict(f"Invoice {invoice_id} is {current.status}: a paid invoice cannot be deleted",
                   {"id": [f"is {current.status.lower()}"]})


def document_row(conn: Connection, org: str, invoice_id: str):
    """The invoice and its organization's name, for the CSV and PDF documents."""
    row = conn.execute(select(invoices, organizations.c.name.label("organization_name"))
                       .join(organizations, organizations.c.id == invoices.c.organization_id)
                       .where(invoices.c.organization_id == org, invoices.c.id == invoice_id)).first()
    if row is None:
        _get(conn, org, invoice_id)  # raises the 404
    return row


def list_all(conn: Connection, org: str | None, limit: int = 100):
    query = select(invoices).order_by(invoices.c.created_at.desc(), invoices.c.id.desc()).limit(limit)
    if org is not None:
        query = query.where(invoices.c.organization_id == org)
    return conn.execute(query).all()


class UnknownInvoice(LookupError):
    pass


@dataclass
class Paid:
    changed: bool  # False: the invoice was not OPEN (see status)
    status: str
    invoice: dict
    available_cents: int | None = None
    amount_cents: int | None = None  # the credit, when changed


def pay(engine: Engine, invoice_id: str) -> Paid:
    """The operator marks an OPEN invoice paid: status, paid_at, the credit of the balance in
    its currency (created if the organization holds none) and the webhook event, in one
    transaction. An invoice that is not OPEN changes nothing."""
    with db.read(engine) as conn:
        found = conn.execute(select(invoices).where(invoices.c.id == invoice_id)).first()
    if found is None:
        raise UnknownInvoice(invoice_id)
    for _ in range(3):
        try:
            with db.write(engine) as conn:
                row = conn.execute(update(invoices).where(invoices.c.id == invoice_id, invoices.c.status == OPEN)
                                   .values(status=PAID, paid_at=utcnow()).returning(*invoices.c)).first()
                if row is None:
                    current = conn.execute(select(invoices).where(invoices.c.id == invoice_id)).one()
                    return Paid(False, current.status, to_wire(current))
                # Created here, in the payment's transaction: a refused payment (the invoice
                # paid or deleted meanwhile) leaves no empty balance behind.
                source = funding.balance_in(conn, row.organization_id, row.currency_code, create=True)
                conn.execute(update(invoices).where(invoices.c.id == invoice_id).values(funding_source_id=source.id))
                after = funding.credit(conn, funding_source_id=source.id, organization_id=row.organization_id,
                                       amount_cents=row.amount_cents, kind=LEDGER_KIND,
                                       memo=f"Invoice {row.id} paid", reference=reference(row.id))
                webhooks.emit(conn, row.organization_id, [("INVOICES.PAID", row.id)])
                return Paid(True, PAID, to_wire(row), after, row.amount_cents)
        except IntegrityError:  # a concurrent run created the balance first: the next round finds it
            continue
    raise RuntimeError(f"could not pay invoice {invoice_id}: the database refused three times")


def to_wire(row) -> dict:
    """The Invoice object (API.md §3): paid_at is declared required-but-nullable, so it is
    always present (null until paid); memo and deleted_at are extras the client ignores."""
    wire = {
        "id": row.id, "amount": amount_to_wire(row.amount_cents), "currency_code": row.currency_code,
        "currency": row.currency_code, "international": False, "status": row.status, "orders": [], "rewards": [],
        "created_at": iso(row.created_at), "paid_at": iso(row.paid_at),
    }
    if row.po_number is not None:
        wire["po_number"] = row.po_number
    if row.memo is not None:
        wire["memo"] = row.memo
    if row.deleted_at is not None:
        wire["deleted_at"] = iso(row.deleted_at)
    return wire
