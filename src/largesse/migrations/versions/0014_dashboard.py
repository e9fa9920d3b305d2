"""The dashboard: sign-in links, sessions, uploaded CSV files; indexes for its lists

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dashboard_signin_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("member_id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("next_path", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("used_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["member_id"], ["members.id"], ondelete="CASCADE",
                                name=op.f("fk_dashboard_signin_tokens_member_id_members")),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_dashboard_signin_tokens")),
    )
    op.create_index("ix_dashboard_signin_tokens_member", "dashboard_signin_tokens", ["member_id"])
    op.create_table(
        "dashboard_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("member_id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["member_id"], ["members.id"], ondelete="CASCADE",
                                name=op.f("fk_dashboard_sessions_member_id_members")),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_dashboard_sessions")),
    )
    op.create_index("ix_dashboard_sessions_member", "dashboard_sessions", ["member_id"])
    op.create_table(
        "dashboard_uploads",
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("member_id", sa.String(length=20), nullable=False),
        sa.Column("filename", sa.String(length=200), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name=op.f("fk_dashboard_uploads_organization_id_organizations")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dashboard_uploads")),
    )
    op.create_index("ix_dashboard_uploads_org", "dashboard_uploads", ["organization_id", "created_at"])
    # The overview counts this month's rewards of each status from the index alone, and a list
    # filtered by a status walks only its own rows, newest first.
    op.create_index("ix_rewards_org_status_created", "rewards", ["organization_id", "status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_rewards_org_status_created", table_name="rewards")
    op.drop_index("ix_dashboard_uploads_org", table_name="dashboard_uploads")
    op.drop_table("dashboard_uploads")
    op.drop_index("ix_dashboard_sessions_member", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
    op.drop_index("ix_dashboard_signin_tokens_member", table_name="dashboard_signin_tokens")
    op.drop_table("dashboard_signin_tokens")
