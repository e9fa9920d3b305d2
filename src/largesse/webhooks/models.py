from sqlalchemy import Boolean, Column, DateTime, ForeignKey, Index, Integer, String, Table, Text

from largesse.db import metadata

# One webhook per organization (API.md §1: posting again replaces its URL).
webhooks = Table(
    "webhooks", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False, unique=True),
    Column("url", String(2000), nullable=False),
    # Before migration 0006 the HMAC signing secret was stored here in plaintext; 0006 moves it
    # to private_key_encrypted and leaves NULL. Still read as a fallback (a row an older
    # process wrote during a rolling upgrade), never written.
    Column("private_key", String(100), nullable=True),
    # The signing secret as a Fernet token under LARGESSE_SECRET_KEY (crypto.py).
    Column("private_key_encrypted", Text, nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
)

# One row per delivery attempt of an event (webhooks/deliveries.py): what the receiver saw.
webhook_deliveries = Table(
    "webhook_deliveries", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), nullable=False),
    Column("webhook_id", String(20), nullable=False),
    Column("job_id", Integer, nullable=True),
    Column("event", String(100), nullable=False),
    Column("event_uuid", String(64), nullable=False),
    Column("url", String(2000), nullable=False),
    Column("attempt", Integer, nullable=False),
    # SUCCEEDED | FAILED
    Column("status", String(20), nullable=False),
    Column("will_retry", Boolean, nullable=False, default=False),
    Column("response_status", Integer, nullable=True),
    Column("duration_ms", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Column("started_at", DateTime, nullable=False),
    Column("finished_at", DateTime, nullable=False),
    Index("ix_webhook_deliveries_webhook_started", "webhook_id", "started_at"),
)
