from sqlalchemy import Column, DateTime, ForeignKey, String, Table

from largesse.db import metadata

# One webhook per organization (API.md §1: posting again replaces its URL).
webhooks = Table(
    "webhooks", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False, unique=True),
    Column("url", String(2000), nullable=False),
    # The HMAC signing secret. It must be usable to sign, so unlike API keys it cannot be
    # stored as a hash; it is returned to the organization's own key holders only.
    Column("private_key", String(100), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
)
