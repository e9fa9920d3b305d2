"""sub-organizations, connected organizations and their sign-in sessions

- organizations.phone: as given to POST /organizations.
- organizations.parent_organization_id: the organization that created this one through
  POST /organizations or POST /connected_organizations (NULL for the operator's).
- connected_organizations: a platform's customer, onboarded as a real sub-organization.
  client_id is unique per platform among the live ones (a deleted one frees its client_id).
- connected_organization_members: a real member of a connected organization, as the platform
  knows them (external name and email).
- connected_member_sessions: single-use sign-in links (/connect/{token}); only the token's
  SHA-256 is stored; spent_at is set once by a conditional UPDATE.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("organizations", sa.Column("parent_organization_id", sa.String(length=20), nullable=True))
    op.add_column("organizations", sa.Column("phone", sa.String(length=50), nullable=True))
    op.create_index("ix_organizations_parent", "organizations", ["parent_organization_id", "created_at"])
    op.create_table(
        "connected_organizations",
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("platform_organization_id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("client_id", sa.String(length=200), nullable=False),
        sa.Column("kyb_prefill", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["platform_organization_id"], ["organizations.id"],
                                name="fk_conn_orgs_platform_org"),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name="fk_conn_orgs_org"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connected_organizations")),
        sa.UniqueConstraint("organization_id", name=op.f("uq_connected_organizations_organization_id")),
    )
    op.create_index("ix_connected_organizations_platform", "connected_organizations",
                    ["platform_organization_id", "created_at"])
    op.create_index("uq_connected_organizations_client_id", "connected_organizations",
                    ["platform_organization_id", "client_id"], unique=True,
                    sqlite_where=sa.text("deleted_at IS NULL"), postgresql_where=sa.text("deleted_at IS NULL"))
    op.create_table(
        "connected_organization_members",
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("connected_organization_id", sa.String(length=20), nullable=False),
        sa.Column("platform_organization_id", sa.String(length=20), nullable=False),
        sa.Column("member_id", sa.String(length=20), nullable=False),
        sa.Column("external_name", sa.String(length=200), nullable=True),
        sa.Column("external_email", sa.String(length=320), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["connected_organization_id"], ["connected_organizations.id"],
                                name="fk_conn_org_members_connected_org"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connected_organization_members")),
    )
    op.create_index("ix_connected_organization_members_connected", "connected_organization_members",
                    ["connected_organization_id", "created_at"])
    op.create_table(
        "connected_member_sessions",
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("connected_organization_member_id", sa.String(length=20), nullable=False),
        sa.Column("member_id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("return_url", sa.String(length=2000), nullable=False),
        sa.Column("state", sa.String(length=1024), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("spent_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connected_member_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_connected_member_sessions_token_hash")),
    )
    op.create_index("ix_connected_member_sessions_member", "connected_member_sessions",
                    ["connected_organization_member_id"])


def downgrade() -> None:
    op.drop_index("ix_connected_member_sessions_member", table_name="connected_member_sessions")
    op.drop_table("connected_member_sessions")
    op.drop_index("ix_connected_organization_members_connected", table_name="connected_organization_members")
    op.drop_table("connected_organization_members")
    op.drop_index("uq_connected_organizations_client_id", table_name="connected_organizations")
    op.drop_index("ix_connected_organizations_platform", table_name="connected_organizations")
    op.drop_table("connected_organizations")
    op.drop_index("ix_organizations_parent", table_name="organizations")
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("parent_organization_id")
        batch.drop_column("phone")
