"""Reports and fraud controls

- reports, report_chunks: report requests and their CSV, stored in the database in chunks
  (docs/reports.md).
- fraud_rules, fraud_reviews, redemption_signals: an organization's rules, the redemptions
  they held, and what the redemption page saw (docs/fraud.md).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reports",
        sa.Column("id", sa.String(20), nullable=False),
        sa.Column("organization_id", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("report_type", sa.String(40), nullable=False),
        sa.Column("format", sa.String(10), nullable=False),
        sa.Column("filters", sa.JSON(), nullable=False),
        sa.Column("requested_by", sa.String(20), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("generation", sa.String(60), nullable=True),
        sa.Column("row_count", sa.BigInteger(), nullable=True),
        sa.Column("byte_size", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("download_salt", sa.String(64), nullable=True),
        sa.Column("download_hash", sa.String(64), nullable=True),
        sa.Column("url_expires_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name=op.f("fk_reports_organization_id_organizations")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reports")),
        sa.UniqueConstraint("download_hash", name=op.f("uq_reports_download_hash")),
    )
    op.create_index("ix_reports_org_status", "reports", ["organization_id", "status"])
    op.create_table(
        "report_chunks",
        sa.Column("report_id", sa.String(20), nullable=False),
        sa.Column("generation", sa.String(60), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["report_id"], ["reports.id"], name=op.f("fk_report_chunks_report_id_reports")),
        sa.PrimaryKeyConstraint("report_id", "generation", "seq", name=op.f("pk_report_chunks")),
    )
    op.create_table(
        "fraud_rules",
        sa.Column("organization_id", sa.String(20), nullable=False),
        sa.Column("rule_type", sa.String(40), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name=op.f("fk_fraud_rules_organization_id_organizations")),
        sa.PrimaryKeyConstraint("organization_id", "rule_type", name=op.f("pk_fraud_rules")),
    )
    op.create_table(
        "fraud_reviews",
        sa.Column("reward_id", sa.String(20), nullable=False),
        sa.Column("organization_id", sa.String(20), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("risk", sa.String(10), nullable=False),
        sa.Column("product_id", sa.String(20), nullable=False),
        sa.Column("ip", sa.String(64), nullable=True),
        sa.Column("country", sa.String(2), nullable=True),
        sa.Column("device_id", sa.String(64), nullable=True),
        sa.Column("redeemed_at", sa.DateTime(), nullable=False),
        sa.Column("reviewed_by", sa.String(40), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["reward_id"], ["rewards.id"], name=op.f("fk_fraud_reviews_reward_id_rewards")),
        sa.PrimaryKeyConstraint("reward_id", name=op.f("pk_fraud_reviews")),
    )
    op.create_index("ix_fraud_reviews_org_redeemed", "fraud_reviews", ["organization_id", "redeemed_at"])
    op.create_table(
        "redemption_signals",
        sa.Column("reward_id", sa.String(20), nullable=False),
        sa.Column("organization_id", sa.String(20), nullable=False),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("ip", sa.String(64), nullable=True),
        sa.Column("country", sa.String(2), nullable=True),
        sa.Column("device_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["reward_id"], ["rewards.id"],
                                name=op.f("fk_redemption_signals_reward_id_rewards")),
        sa.PrimaryKeyConstraint("reward_id", name=op.f("pk_redemption_signals")),
    )
    op.create_index("ix_redemption_signals_ip", "redemption_signals", ["organization_id", "ip"])
    op.create_index("ix_redemption_signals_device", "redemption_signals", ["organization_id", "device_id"])
    op.create_index("ix_redemption_signals_email", "redemption_signals", ["organization_id", "email", "created_at"])


def downgrade() -> None:
    op.drop_table("redemption_signals")
    op.drop_table("fraud_reviews")
    op.drop_table("fraud_rules")
    op.drop_table("report_chunks")
    op.drop_index("ix_reports_org_status", table_name="reports")
    op.drop_table("reports")
