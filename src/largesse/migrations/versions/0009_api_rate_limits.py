"""API rate limits and environment of organizations

- organizations.environment: "sandbox" or "production". A server only accepts keys of
  organizations of its own environment (auth.caller_from). Existing organizations are
  backfilled from their keys' prefixes: any LRG_PROD_ key makes a production organization.
- api_rate_limits: per-window request counters of API keys and organizations, shared by
  every server process (largesse/ratelimit.py adds each process's counts about once a second).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("organizations",
                  sa.Column("environment", sa.String(length=20), nullable=False, server_default="sandbox"))
    op.execute(
        "UPDATE organizations SET environment = 'production' WHERE EXISTS ("
        "SELECT 1 FROM api_keys WHERE api_keys.organization_id = organizations.id "
        "AND substr(api_keys.prefix, 1, 9) = 'LRG_PROD_')"
    )
    op.create_table(
        "api_rate_limits",
        sa.Column("bucket", sa.String(length=100), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("hits", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", "window_start", name=op.f("pk_api_rate_limits")),
    )
    op.create_index("ix_api_rate_limits_window", "api_rate_limits", ["window_start"])


def downgrade() -> None:
    op.drop_index("ix_api_rate_limits_window", table_name="api_rate_limits")
    op.drop_table("api_rate_limits")
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("environment")
