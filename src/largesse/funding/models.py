from sqlalchemy import BigInteger, Column, DateTime, ForeignKey, Index, Integer, String, Table, UniqueConstraint, text

from largesse.db import metadata

funding_sources = Table(
    "funding_sources", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("method", String(20), nullable=False, default="balance"),
    Column("currency_code", String(3), nullable=False),
    # Cached sum of the ledger; changed only in the transaction that appends the entry.
    Column("available_cents", BigInteger, nullable=False, default=0),
    Column("pending_cents", BigInteger, nullable=False, default=0),
    Column("status", String(20), nullable=False, default="active"),
    Column("created_at", DateTime, nullable=False),
    # Several balances per organization, one per currency (migration 0011).
    UniqueConstraint("organization_id", "method", "currency_code"),
)

ledger_entries = Table(
    "ledger_entries", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("funding_source_id", String(20), ForeignKey("funding_sources.id"), nullable=False),
    Column("organization_id", String(20), nullable=False),
    # Signed: credits positive, debits negative.
    Column("amount_cents", BigInteger, nullable=False),
    Column("balance_after_cents", BigInteger, nullable=False),
    # sandbox_credit | funding | order | reward_refund | order_refund | topup | invoice_payment
    # (verify.py: any other kind is a problem)
    Column("kind", String(30), nullable=False),
    Column("memo", String(500), nullable=True),
    Column("order_id", String(20), nullable=True),
    Column("reward_id", String(20), nullable=True),
    Column("created_at", DateTime, nullable=False),
    # An operator's funding reference (wire ID...): the same one credits an organization once.
    Column("reference", String(200), nullable=True),
    Index("ix_ledger_entries_fs_id", "funding_source_id", "id"),
    Index("ix_ledger_entries_org_id", "organization_id", "id", "created_at"),  # GET /balance_transactions
    Index("ix_ledger_entries_order", "order_id"),
    # A reward is refunded at most once, whatever retries or races happen.
    Index("uq_ledger_entries_refund", "reward_id", "kind", unique=True),
    Index("uq_ledger_entries_org_reference", "organization_id", "reference", unique=True),
    # A rejected order is refunded (its whole total) at most once (orders/approvals.py).
    Index("uq_ledger_entries_order_refund", "order_id", unique=True,
          sqlite_where=text("kind = 'order_refund'"), postgresql_where=text("kind = 'order_refund'")),
)
