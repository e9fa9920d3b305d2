"""The dashboard's own tables: sign-in links, sessions, uploaded CSV files.

Secrets (sign-in tokens, session ids) are stored as SHA-256 hex digests only: they carry
256 random bits, so a fast hash is enough and a database leak gives nobody a way in.
"""

from sqlalchemy import JSON, Column, DateTime, ForeignKey, Index, Integer, String, Table, Text

from largesse.db import metadata

signin_tokens = Table(
    "dashboard_signin_tokens", metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("member_id", String(20), ForeignKey("members.id", ondelete="CASCADE"), nullable=False),
    Column("organization_id", String(20), nullable=False),
    Column("next_path", String(500), nullable=True),  # a local path only (signin.local_path)
    Column("created_at", DateTime, nullable=False),
    Column("expires_at", DateTime, nullable=False),
    Column("used_at", DateTime, nullable=True),  # single use: set by the POST that spends it
    Index("ix_dashboard_signin_tokens_member", "member_id"),
)

sessions = Table(
    "dashboard_sessions", metadata,
    Column("id_hash", String(64), primary_key=True),  # SHA-256 of the cookie's random value
    Column("member_id", String(20), ForeignKey("members.id", ondelete="CASCADE"), nullable=False),
    Column("organization_id", String(20), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("last_seen_at", DateTime, nullable=False),  # idle expiry counts from here
    Column("expires_at", DateTime, nullable=False),  # absolute expiry
    Column("ended_at", DateTime, nullable=True),  # sign-out
    Index("ix_dashboard_sessions_member", "member_id"),
)

uploads = Table(
    "dashboard_uploads", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("member_id", String(20), nullable=False),
    Column("filename", String(200), nullable=False),
    Column("sha256", String(64), nullable=False),  # the order's external_id derives from it
    Column("content", Text, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("options", JSON, nullable=True),  # products, campaign and message chosen with the file
    Column("created_at", DateTime, nullable=False),
    Index("ix_dashboard_uploads_org", "organization_id", "created_at"),
)
