from sqlalchemy import BigInteger, Column, DateTime, ForeignKey, Index, String, Table, UniqueConstraint

from largesse.db import metadata

topups = Table(
    "topups", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("funding_source_id", String(20), ForeignKey("funding_sources.id"), nullable=False),
    Column("amount_cents", BigInteger, nullable=False),
    Column("currency_code", String(3), nullable=False),
    # created -> fully_credited | rejected (each change is a conditional UPDATE from created)
    Column("status", String(20), nullable=False),
    Column("idempotency_key", String(200), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("fully_credited_at", DateTime, nullable=True),
    Column("rejected_at", DateTime, nullable=True),
    Column("rejected_reason", String(500), nullable=True),
    # A key names one top-up of the organization, whatever the races.
    UniqueConstraint("organization_id", "idempotency_key"),
    # The list, newest first by (created_at, id): one walk of this index (migration 0021).
    Index("ix_topups_org_created_id", "organization_id", "created_at", "id"),
)
