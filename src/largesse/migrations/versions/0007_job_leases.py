"""jobs: short leases renewed by a heartbeat, per-kind lanes

Revision ID: 0007
Revises: 0006

- jobs.lane: which worker threads may claim a job ("mail": emails, the expiry sweep and any
  other kind; "webhook": webhook POSTs). A slow webhook receiver then only ever occupies
  webhook threads, never the threads that send emails (docs/delivery.md, "Lanes").
- ix_jobs_claim becomes (status, lane, run_after): the oldest due job of a lane.
- ix_jobs_lane_org (status, lane, organization_id, run_after): the oldest due job of the next
  organization after a cursor, for the round-robin claim (one organization's backlog does not
  delay another's jobs).
Leases themselves need no schema change: the heartbeat keeps moving locked_until forward.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lane", sa.String(length=10), nullable=False, server_default="mail"))
    op.execute("UPDATE jobs SET lane = 'webhook' WHERE kind = 'deliver_webhook'")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_claim")
        batch_op.create_index("ix_jobs_claim", ["status", "lane", "run_after"], unique=False)
        batch_op.create_index("ix_jobs_lane_org", ["status", "lane", "organization_id", "run_after"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_lane_org")
        batch_op.drop_index("ix_jobs_claim")
        batch_op.create_index("ix_jobs_claim", ["status", "run_after"], unique=False)
        batch_op.drop_column("lane")
