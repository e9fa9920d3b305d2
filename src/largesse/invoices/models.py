from sqlalchemy import BigInteger, Column, DateTime, ForeignKey, Index, String, Table

from largesse.db import metadata

invoices = Table(
    "invoices", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("amount_cents", BigInteger, nullable=False),
    Column("currency_code", String(3), nullable=False),
    Column("po_number", String(200), nullable=True),
    Column("memo", String(1000), nullable=True),
    # OPEN -> PAID | DELETED (each change is a conditional UPDATE from OPEN)
    Column("status", String(10), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("paid_at", DateTime, nullable=True),
    Column("deleted_at", DateTime, nullable=True),
    # The balance the payment credited (set when paid).
    Column("funding_source_id", String(20), nullable=True),
    # The list, newest first by (created_at, id): one walk of this index (migration 0021).
    Index("ix_invoices_org_created_id", "organization_id", "created_at", "id"),
)
