from sqlalchemy import JSON, Column, DateTime, ForeignKey, Index, String, Table, UniqueConstraint, text

from largesse.db import metadata

connected_organizations = Table(
    "connected_organizations", metadata,
    Column("id", String(20), primary_key=True),
    # The platform: the API caller that onboarded this organization.
    Column("platform_organization_id", String(20), ForeignKey("organizations.id", name="fk_conn_orgs_platform_org"),
           nullable=False),
    # The real Largesse organization (a sub-organization of the platform).
    Column("organization_id", String(20), ForeignKey("organizations.id", name="fk_conn_orgs_org"), nullable=False),
    Column("client_id", String(200), nullable=False),
    Column("kyb_prefill", JSON, nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("deleted_at", DateTime, nullable=True),
    UniqueConstraint("organization_id"),
    # The list of the live ones, newest first by (created_at, id): one walk of this index. Partial
    # as the unique index below is, or PostgreSQL without statistics read the list through that
    # one and sorted every row (migrations 0021, 0028).
    Index("ix_connected_organizations_live_created_id", "platform_organization_id", "created_at", "id",
          sqlite_where=text("deleted_at IS NULL"), postgresql_where=text("deleted_at IS NULL")),
    Index("uq_connected_organizations_client_id", "platform_organization_id", "client_id", unique=True,
          sqlite_where=text("deleted_at IS NULL"), postgresql_where=text("deleted_at IS NULL")),
)

connected_organization_members = Table(
    "connected_organization_members", metadata,
    Column("id", String(20), primary_key=True),
    Column("connected_organization_id", String(20),
           ForeignKey("connected_organizations.id", name="fk_conn_org_members_connected_org"), nullable=False),
    Column("platform_organization_id", String(20), nullable=False),
    # The real member of the connected organization (members.id).
    Column("member_id", String(20), nullable=False),
    Column("external_name", String(200), nullable=True),
    Column("external_email", String(320), nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("deleted_at", DateTime, nullable=True),
    Index("ix_connected_organization_members_connected", "connected_organization_id", "created_at"),
)

connected_member_sessions = Table(
    "connected_member_sessions", metadata,
    Column("id", String(20), primary_key=True),
    # SHA-256 of the token in the /connect/{token} URL; the token itself is never stored.
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("connected_organization_member_id", String(20), nullable=False),
    Column("member_id", String(20), nullable=False),
    Column("organization_id", String(20), nullable=False),
    Column("return_url", String(2000), nullable=False),
    Column("state", String(1024), nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("expires_at", DateTime, nullable=False),
    Column("spent_at", DateTime, nullable=True),
    Column("revoked_at", DateTime, nullable=True),
    Index("ix_connected_member_sessions_member", "connected_organization_member_id"),
)
