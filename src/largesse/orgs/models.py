from sqlalchemy import BigInteger, Boolean, Column, DateTime, ForeignKey, Index, Integer, String, Table, true

from largesse.db import metadata

organizations = Table(
    "organizations", metadata,
    Column("id", String(20), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("website", String(500), nullable=True),
    Column("phone", String(50), nullable=True),
    Column("currency_code", String(3), nullable=False, default="USD"),
    # Fee settings: a percentage of each reward (basis points) plus a flat fee per reward.
    Column("fee_basis_points", Integer, nullable=False, default=0),
    Column("fee_flat_cents", Integer, nullable=False, default=0),
    # Days until an unredeemed reward expires and is refunded (None: never).
    Column("reward_expiry_days", Integer, nullable=True),
    Column("created_at", DateTime, nullable=False),
    # "sandbox" or "production" (config.ENVIRONMENTS): a server accepts only the keys of its
    # own environment's organizations, whatever a key's prefix says (auth.caller_from).
    Column("environment", String(20), nullable=False, server_default="sandbox"),
    # Order approvals (orders/approvals.py, docs/approvals.md): which new orders wait for an
    # approval ("off", "api", "all", "above"), the threshold of "above" (a total strictly
    # greater needs approval), and whether an API key may approve or reject.
    Column("approval_mode", String(10), nullable=False, server_default="off"),
    Column("approval_above_cents", BigInteger, nullable=True),
    Column("approval_api_allowed", Boolean, nullable=False, server_default=true()),
    # The organization that created this one (POST /organizations, POST /connected_organizations);
    # NULL for organizations the operator created. Sub-organizations share its environment.
    Column("parent_organization_id", String(20), nullable=True),
    # The top of its line of parents (itself for an operator's organization): the customer, whose
    # organizations share one share of the webhook threads (delivery.jobs.claim's org_cap).
    Column("root_organization_id", String(20), nullable=True),
    Index("ix_organizations_parent", "parent_organization_id", "created_at"),
)

members = Table(
    "members", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("email", String(320), nullable=False),
    # orgs.service.email_key: the mailbox (ASCII case folded, no +tag), as addresses compare.
    Column("email_key", String(320), nullable=False),
    Column("name", String(200), nullable=True),
    Column("role", String(40), nullable=False, default="ADMIN"),
    Column("status", String(20), nullable=False, default="REGISTERED"),
    Column("active", Boolean, nullable=False, default=True),
    Column("created_at", DateTime, nullable=False),
    # The member's last sign-in to the dashboard (dashboard.signin.start_session).
    Column("last_login_at", DateTime, nullable=True),
    Index("uq_members_org_email", "organization_id", "email_key", unique=True),
)

api_keys = Table(
    "api_keys", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    # SHA-256 of the whole key; the key itself is shown once and never stored.
    Column("key_hash", String(64), nullable=False, unique=True),
    # First characters of the key, to recognise it in `largesse keys list`.
    Column("prefix", String(16), nullable=False),
    Column("permission", String(20), nullable=False, default="read_write"),
    Column("label", String(200), nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("revoked_at", DateTime, nullable=True),
)
