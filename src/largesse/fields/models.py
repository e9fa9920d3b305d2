from sqlalchemy import JSON, Boolean, Column, DateTime, ForeignKey, String, Table, Text, UniqueConstraint

from largesse.db import metadata

fields = Table(
    "fields", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("label", String(100), nullable=False),
    Column("data_type", String(20), nullable=False),
    Column("data", JSON, nullable=True),
    Column("required", Boolean, nullable=False, default=False),
    Column("scope", String(20), nullable=False, default="REWARD"),
    Column("description", Text, nullable=True),
    Column("created_at", DateTime, nullable=False),
    UniqueConstraint("organization_id", "label"),
)
