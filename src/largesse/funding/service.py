"""Balances and their ledger.

The ledger is append-only; funding_sources.available_cents is a cache of its sum, changed
only in the same transaction that appends an entry. `verify` (funding/verify.py) proves that
and every other money invariant of orders, rewards, refunds and payouts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, func, select, update
from sqlalchemy.exc import IntegrityError

from largesse import db, paging
from largesse.errors import BadRequest, NotFound, PaymentRequired, nest
from largesse.funding.models import funding_sources, ledger_entries
from largesse.funding.verify import Problem, verify  # noqa: F401 - public: funding.service.verify(conn)
from largesse.ids import new_id
from largesse.orgs.models import organizations
from largesse.timeutil import utcnow
from largesse.webhooks import service as webhooks

MAGIC_BALANCE = "BALANCE"
# Currencies an organization may hold balances in besides its own (docs/funding.md).
BALANCE_CURRENCIES = ("USD", "EUR", "GBP")
FUNDED_EVENT = "FUNDING_SOURCES.FUNDED"  # API.md §8: a balance was credited (funding, top-up)
UNSUPPORTED_METHODS = ("INVOICE", "INVOICE_THEN_BALANCE")


def create_balance(conn: Connection, *, organization_id: str, currency_code: str) -> str:
    fs_id = new_id()
    conn.execute(funding_sources.insert().values(
        id=fs_id, organization_id=organization_id, method="balance", currency_code=currency_code,
        available_cents=0, pending_cents=0, status="active", created_at=utcnow(),
    ))
    return fs_id


# BALANCE is the primary balance: the one in the organization's own currency (created with it).
_BY_METHOD = select(funding_sources).where(
    funding_sources.c.organization_id == bindparam("org"), funding_sources.c.method == "balance",
    funding_sources.c.currency_code == select(organizations.c.currency_code)
    .where(organizations.c.id == bindparam("org")).scalar_subquery())
_IN_CURRENCY = select(funding_sources).where(
    funding_sources.c.organization_id == bindparam("org"), funding_sources.c.method == "balance",
    funding_sources.c.currency_code == bindparam("currency"))
_BY_ID = select(funding_sources).where(
    funding_sources.c.organization_id == bindparam("org"), funding_sources.c.id == bindparam("id"))
_DEBIT = db.Prepared(
    update(funding_sources)
    .where(funding_sources.c.id == bindparam("fs_id"), funding_sources.c.available_cents >= bindparam("amount"))
    .values(available_cents=funding_sources.c.available_cents - bindparam("amount"))
    .returning(funding_sources.c.available_cents)
)
_CREDIT = (
    update(funding_sources)
    .where(funding_sources.c.id == bindparam("fs_id"))
    .values(available_cents=funding_sources.c.available_cents + bindparam("amount"))
    .returning(funding_sources.c.available_cents)
)
_APPEND = db.Prepared(ledger_entries.insert())


def resolve(conn: Connection, organization_id: str, funding_source_id: str, *, loc=("id",)):
    """A funding source of the organization by ID or keyword; 404 for anything else."""
    keyword = _refuse_unsupported(funding_source_id, loc)
    if keyword == MAGIC_BALANCE:
        row = conn.execute(_BY_METHOD, {"org": organization_id}).first()
    else:
        row = conn.execute(_BY_ID, {"org": organization_id, "id": funding_source_id}).first()
    if row is None:
        raise NotFound(f"Funding source {funding_source_id} not found", nest(loc, "not found"))
    return row


def balance_in(conn: Connection, organization_id: str, currency_code: str, *, create: bool = False):
    """The organization's balance in currency_code, or None; with create, made when missing
    (the unique (organization_id, method, currency_code) keeps it to one under races: the
    loser's transaction fails and a re-run finds the winner's)."""
    row = conn.execute(_IN_CURRENCY, {"org": organization_id, "currency": currency_code}).first()
    if row is None and create:
        create_balance(conn, organization_id=organization_id, currency_code=currency_code)
        row = conn.execute(_IN_CURRENCY, {"org": organization_id, "currency": currency_code}).first()
    return row


def check_balance_reference(balance_id: str | None, funding_source_id: str, *, loc=("id",)) -> str:
    """resolve() for a caller who already knows the organization's balance ID (one query less),
    for a reference inside a request body: an unknown one is a 400 pointing at loc, not a 404."""
    keyword = _refuse_unsupported(funding_source_id, loc)
    if balance_id is None or (keyword != MAGIC_BALANCE and funding_source_id != balance_id):
        raise BadRequest(f"Funding source {funding_source_id} not found", nest(loc, "not found"))
    return balance_id


def _refuse_unsupported(funding_source_id: str, loc) -> str:
    keyword = funding_source_id.upper()
    if keyword in UNSUPPORTED_METHODS:
        raise BadRequest(
            f"Funding source {funding_source_id} is not available: this service pays only from the balance",
            nest(loc, "is not available"),
        )
    return keyword


def list_for(conn: Connection, organization_id: str):
    return conn.execute(
        select(funding_sources).where(funding_sources.c.organization_id == organization_id)
        .order_by(funding_sources.c.created_at, funding_sources.c.id)
    ).all()


def available(conn: Connection, funding_source_id: str) -> int:
    return conn.execute(select(funding_sources.c.available_cents).where(funding_sources.c.id == funding_source_id)
                        ).scalar_one()


def balance_transactions(conn: Connection, organization_id: str, *, offset: int, limit: int,
                         created_gte=None, created_lte=None, before_id: int | None = None):
    """Ledger entries of the organization, newest first, with their order's amounts
    (GET /balance_transactions; the dashboard's Funding page pages by `before_id`).

    The page walks ix_ledger_entries_org_id backwards (its created_at checked in the index) and
    stops after offset + limit entries, whatever the planner knows (db.index_walks); only the
    page's entries are joined to their balance and order. Joining first, both planners read
    and sorted every entry of the organization: 145-600 ms at 100,000 (docs/benchmarks.md)."""
    return _ledger_listing().rows(conn, {"org": organization_id, "before_id": before_id, "created_gte": created_gte,
                                         "created_lte": created_lte}, offset=offset, limit=limit)


@functools.cache
def _ledger_listing() -> paging.Listing:
    from largesse.orders.models import orders  # orders imports this module

    joined = (select(ledger_entries, funding_sources.c.currency_code, orders.c.external_id,
                     orders.c.subtotal_cents, orders.c.total_cents, orders.c.fees_cents, orders.c.fx_currency_code,
                     orders.c.fx_rate, orders.c.fx_rate_date, orders.c.fx_total_cents, orders.c.refund_cents)
              .join(funding_sources, funding_sources.c.id == ledger_entries.c.funding_source_id)
              .outerjoin(orders, orders.c.id == ledger_entries.c.order_id))
    return paging.Listing(ledger_entries, ledger_entries.c.organization_id == bindparam("org"), {
        "before_id": ledger_entries.c.id < bindparam("before_id"),
        "created_gte": ledger_entries.c.created_at >= bindparam("created_gte"),
        "created_lte": ledger_entries.c.created_at <= bindparam("created_lte"),
    }, order_by=(ledger_entries.c.id.desc(),), joined=joined)


def debit(conn: Connection, *, funding_source_id: str, organization_id: str, amount_cents: int, kind: str,
          order_id: str | None = None, reward_id: str | None = None, memo: str | None = None) -> int:
    """Take amount_cents from the balance or raise 402; returns the balance after.

    One conditional UPDATE is both the overdraft guard and the row lock: concurrent
    debits queue on it (PostgreSQL) or on the write lock (SQLite), never overdraw.
    """
    if amount_cents < 0:
        raise ValueError("debit amount must be >= 0")
    row = _DEBIT.first(conn, {"fs_id": funding_source_id, "amount": amount_cents})
    if row is None:
        raise PaymentRequired(
            "Insufficient funds in the balance for this order",
            {"payment": {"funding_source_id": ["insufficient funds"]}},
        )
    balance_after = row[0]
    _append(conn, funding_source_id, organization_id, -amount_cents, balance_after, kind, memo, order_id, reward_id)
    return balance_after


def hold(conn: Connection, *, funding_source_id: str, amount_cents: int) -> None:
    """Add (or, negative, release) amount_cents to the balance's pending_cents: the totals of
    its orders waiting for approval, already debited (orders/approvals.py; verify proves it)."""
    conn.execute(update(funding_sources).where(funding_sources.c.id == funding_source_id)
                 .values(pending_cents=funding_sources.c.pending_cents + amount_cents))


def credit(conn: Connection, *, funding_source_id: str, organization_id: str, amount_cents: int, kind: str,
           memo: str | None = None, order_id: str | None = None, reward_id: str | None = None,
           reference: str | None = None) -> int:
    """Add amount_cents to the balance; returns the balance after. A reference already used by
    the organization violates the ledger's unique index and aborts the caller's transaction."""
    if amount_cents <= 0:
        raise ValueError("credit amount must be > 0")
    balance_after = conn.execute(_CREDIT, {"fs_id": funding_source_id, "amount": amount_cents}).scalar_one()
    _append(conn, funding_source_id, organization_id, amount_cents, balance_after, kind, memo, order_id, reward_id,
            reference)
    return balance_after


def _append(conn, funding_source_id, organization_id, amount, balance_after, kind, memo, order_id, reward_id,
            reference=None):
    _APPEND.execute_many(conn, [{
        "funding_source_id": funding_source_id, "organization_id": organization_id, "amount_cents": amount,
        "balance_after_cents": balance_after, "kind": kind, "memo": memo, "order_id": order_id,
        "reward_id": reward_id, "created_at": utcnow(), "reference": reference,
    }])


@dataclass
class Funded:
    """What `fund` did: credited, or found the reference already credited (credited=False)."""

    credited: bool
    entry_id: int
    amount_cents: int
    available_cents: int
    funding_source_id: str
    currency_code: str


_BY_REFERENCE = select(ledger_entries.c.id, ledger_entries.c.amount_cents, ledger_entries.c.funding_source_id).where(
    ledger_entries.c.organization_id == bindparam("org"), ledger_entries.c.reference == bindparam("reference"))


# References the services write themselves (topups, invoices): an operator's may not take them.
RESERVED_REFERENCE_PREFIXES = ("topup:", "invoice:")


def fund(engine: Engine, *, organization_id: str, amount_cents: int, memo: str, reference: str | None,
         currency_code: str | None = None) -> Funded:
    """An operator's credit of the organization's balance, in one transaction.

    With a reference, the ledger's unique index (organization_id, reference) decides: of any
    number of runs, sequential or concurrent, one INSERT succeeds; the others fail, roll back
    their balance update with it, and report the entry that did credit.
    """
    if reference is not None and reference.lower().startswith(RESERVED_REFERENCE_PREFIXES):
        raise BadRequest(f"references starting with {' or '.join(RESERVED_REFERENCE_PREFIXES)} are reserved",
                         {"reference": ["is reserved"]})

    def source_of(conn):
        if currency_code is None:
            return resolve(conn, organization_id, MAGIC_BALANCE)
        # Created in the credit's transaction: a refused run (its reference already credited)
        # leaves no empty balance behind, which would then pay, and refuse, the orders in its
        # currency (BALANCE picks the balance in the rewards' currency when there is one).
        return balance_in(conn, organization_id, currency_code, create=True)

    for _ in range(3):
        try:
            with db.write(engine) as conn:
                source = source_of(conn)
                after = credit(conn, funding_source_id=source.id, organization_id=organization_id,
                               amount_cents=amount_cents, kind="funding", memo=memo, reference=reference)
                entry_id = conn.execute(select(func.max(ledger_entries.c.id)).where(
                    ledger_entries.c.funding_source_id == source.id)).scalar_one()
                webhooks.emit(conn, organization_id, [(FUNDED_EVENT, source.id)])
                return Funded(True, entry_id, amount_cents, after, source.id, source.currency_code)
        except IntegrityError:
            # The reference was credited already, or a concurrent run created the balance
            # first (the next round finds it).
            if reference is None:
                continue
        with db.read(engine) as conn:
            existing = conn.execute(_BY_REFERENCE, {"org": organization_id, "reference": reference}).first()
            if existing is None:
                continue
            # The balance the reference did credit (it may be another currency's than this run's).
            source = conn.execute(_BY_ID, {"org": organization_id, "id": existing.funding_source_id}).one()
            return Funded(False, existing.id, existing.amount_cents, source.available_cents, source.id,
                          source.currency_code)
    raise RuntimeError(f"could not credit organization {organization_id}: the database refused three times")


# The invariants live in funding/verify.py; `verify(conn) -> list[Problem]` stays importable here.
Discrepancy = Problem  # the name of the earlier, narrower check
