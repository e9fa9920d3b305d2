"""Jobs are claimed oldest first by (run_after, id): the claim index in that order

Revision ID: 0018
Revises: 0017
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ix_jobs_claim lacked the claim's tie-breaker (id). Jobs written together share run_after
    # (the rewards of one order, the deliveries scheduled for one day), and to take the 20
    # oldest, PostgreSQL read and sorted every queued job with that run_after: 27 ms a claim at
    # 20,000 such jobs, 6 ms of PostgreSQL CPU per email (docs/benchmarks.md). With id in the
    # index the claim is an index walk that stops after the batch.
    op.create_index("ix_jobs_claim_id", "jobs", ["status", "lane", "run_after", "id"])
    op.drop_index("ix_jobs_claim", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_claim", "jobs", ["status", "lane", "run_after"])
    op.drop_index("ix_jobs_claim_id", table_name="jobs")
