"""Top-ups: requests to add money to a balance, which the operator credits or rejects.

POST /topups records a request (`created`); nothing is credited until the operator runs
`largesse topups credit ID` (-> `fully_credited`, one ledger entry) or `... reject ID`
(-> `rejected`). Each transition is one conditional UPDATE from `created`, so of any number
of concurrent credits and rejects exactly one changes the row; the ledger's unique
(organization_id, reference) index, with reference `topup:<id>`, is the second lock on the
door: a top-up is credited at most once.

`idempotency_key` names one top-up per organization: a replay with the same funding source
and amount returns the original; the same key with other values is a 409.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, select, update
from sqlalchemy.exc import IntegrityError

from largesse import db, paging
from largesse.errors import ApiError, BadRequest, Conflict, NotFound
from largesse.funding import service as funding
from largesse.ids import new_id
from largesse.money import MoneyError, decimals_for, to_cents
from largesse.timeutil import iso, utcnow
from largesse.topups.models import topups
from largesse.webhooks import service as webhooks

CREATED, CREDITED, REJECTED = "created", "fully_credited", "rejected"
LEDGER_KIND = "topup"
MAX_TOPUP_CENTS = 10**11  # one billion units per request


def reference(topup_id: str) -> str:
    return f"topup:{topup_id}"


@dataclass
class Created:
    topup: dict
    replay: bool


_BY_KEY = select(topups).where(topups.c.organization_id == bindparam("org"),
                               topups.c.idempotency_key == bindparam("key"))


def create(engine: Engine, *, org: str, funding_source_id: str, idempotency_key: str, amount) -> Created:
    """Record a top-up request (nothing is credited yet), or return the one its key names."""
    for _attempt in range(2):
        try:
            with db.write(engine) as conn:
                source = _source(conn, org, funding_source_id)
                cents = _cents(amount, source.currency_code)
                existing = conn.execute(_BY_KEY, {"org": org, "key": idempotency_key}).first()
                if existing is not None:
                    return Created(_replay(existing, source.id, cents), True)
                topup_id = new_id()
                conn.execute(topups.insert().values(
                    id=topup_id, organization_id=org, funding_source_id=source.id, amount_cents=cents,
                    currency_code=source.currency_code, status=CREATED, idempotency_key=idempotency_key,
                    created_at=utcnow()))
                return Created(to_wire(conn.execute(select(topups).where(topups.c.id == topup_id)).one()), False)
        except IntegrityError:
            continue  # a concurrent request with the same key committed first: the next round replays it
    raise RuntimeError("idempotency key neither inserted nor found")


def _source(conn: Connection, org: str, funding_source_id: str):
    """The balance to top up: an ID of one of the organization's balances or BALANCE. Anything
    else is a 400 pointing at funding_source_id (an ID inside a body is no path resource)."""
    try:
        return funding.resolve(conn, org, funding_source_id, loc=("funding_source_id",))
    except ApiError as exc:
        if isinstance(exc, NotFound):
            raise BadRequest(f"Funding source {funding_source_id} not found",
                             {"funding_source_id": ["not found"]}) from None
        raise


def _cents(amount, currency_code: str) -> int:
    try:
        cents = to_cents(amount, decimals=decimals_for(currency_code))
    except MoneyError as exc:
        raise BadRequest(f"amount {exc}", {"amount": [str(exc)]}) from None
    if cents <= 0:
        raise BadRequest("amount must be greater than 0", {"amount": ["must be greater than 0"]})
    if cents > MAX_TOPUP_CENTS:
        raise BadRequest("amount is too large", {"amount": ["is too large"]})
    return cents


def _replay(existing, source_id: str, cents: int) -> dict:
    if existing.funding_source_id != source_id or existing.amount_cents != cents:
        raise Conflict(f"idempotency_key {existing.idempotency_key!r} was already used with other values",
                       {"idempotency_key": ["has already been used with different parameters"]})
    return to_wire(existing)


def get(conn: Connection, org: str, topup_id: str) -> dict:
    return to_wire(db.owned_or_404(conn, topups, org, topup_id, "Topup"))


def page(conn: Connection, org: str, *, offset: int, limit: int) -> tuple[list[dict], int]:
    """Newest first; total_count bounded as every list counts (paging.bounded_count). A walk of
    ix_topups_org_created_id that stops after offset + limit top-ups (db.index_walks:
    whatever the planner knows)."""
    rows, total = _LIST.page(conn, {"org": org}, offset=offset, limit=limit)
    return [to_wire(r) for r in rows], total


_LIST = paging.Listing(topups, topups.c.organization_id == bindparam("org"), {},
                       order_by=(topups.c.created_at.desc(), topups.c.id.desc()))


def list_all(conn: Connection, org: str | None, limit: int = 100):
    query = select(topups).order_by(topups.c.created_at.desc(), topups.c.id.desc()).limit(limit)
    if org is not None:
        query = query.where(topups.c.organization_id == org)
    return conn.execute(query).all()


@dataclass
class Outcome:
    changed: bool  # False: the top-up was not `created` any more (see status)
    status: str
    topup: dict
    available_cents: int | None = None
    amount_cents: int | None = None  # the credit, when changed


def credit(engine: Engine, topup_id: str) -> Outcome:
    """The operator credits a `created` top-up: status, timestamp, ledger entry and webhook
    event in one transaction. A top-up that is no longer `created` changes nothing."""
    now = utcnow()
    with db.write(engine) as conn:
        row = conn.execute(update(topups).where(topups.c.id == topup_id, topups.c.status == CREATED)
                           .values(status=CREDITED, fully_credited_at=now).returning(*topups.c)).first()
        if row is None:
            return _unchanged(conn, topup_id)
        after = funding.credit(conn, funding_source_id=row.funding_source_id, organization_id=row.organization_id,
                               amount_cents=row.amount_cents, kind=LEDGER_KIND, memo=f"Top-up {row.id}",
                               reference=reference(row.id))
        webhooks.emit(conn, row.organization_id, [(funding.FUNDED_EVENT, row.funding_source_id)])
        return Outcome(True, CREDITED, to_wire(row), after, row.amount_cents)


def reject(engine: Engine, topup_id: str, reason: str | None) -> Outcome:
    now = utcnow()
    with db.write(engine) as conn:
        row = conn.execute(update(topups).where(topups.c.id == topup_id, topups.c.status == CREATED)
                           .values(status=REJECTED, rejected_at=now, rejected_reason=reason)
                           .returning(*topups.c)).first()
        if row is None:
            return _unchanged(conn, topup_id)
        return Outcome(True, REJECTED, to_wire(row))


class UnknownTopup(LookupError):
    pass


def _unchanged(conn: Connection, topup_id: str) -> Outcome:
    row = conn.execute(select(topups).where(topups.c.id == topup_id)).first()
    if row is None:
        raise UnknownTopup(topup_id)
    return Outcome(False, row.status, to_wire(row))


def to_wire(row) -> dict:
    """The Topup object (API.md §3). Every key is optional there, and the Node client types
    them as not nullable: keys without a value are left out, never null."""
    from largesse.money import to_wire as amount

    credited = row.status == CREDITED
    wire = {
        "id": row.id, "amount": amount(row.amount_cents), "currency_code": row.currency_code, "processing_fee": 0,
        "funding_source_id": row.funding_source_id, "status": row.status, "created_at": iso(row.created_at),
        "idempotency_key": row.idempotency_key,
        "instant_credit_amount": amount(row.amount_cents) if credited else 0, "settled_amount": 0,
    }
    optional = {"fully_credited_at": iso(row.fully_credited_at), "rejected_at": iso(row.rejected_at),
                "rejected_reason": row.rejected_reason}
    wire.update({k: v for k, v in optional.items() if v is not None})
    return wire
