from sqlalchemy import JSON, Column, DateTime, Index, Integer, String, Table, Text

from largesse.db import metadata

# The outbox: rows written in the same transaction as the state change they follow
# from, drained by workers (see delivery/worker.py).
jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # deliver_reward | expire_rewards | ...
    Column("kind", String(40), nullable=False),
    Column("organization_id", String(20), nullable=True),
    Column("reward_id", String(20), nullable=True),
    Column("payload", JSON, nullable=True),
    # queued | running | done | dead
    Column("status", String(10), nullable=False, default="queued"),
    Column("attempts", Integer, nullable=False, default=0),
    Column("max_attempts", Integer, nullable=False, default=8),
    Column("run_after", DateTime, nullable=False),
    Column("locked_by", String(100), nullable=True),
    Column("locked_until", DateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
    # Set only on singleton (periodic) jobs, e.g. "expire_rewards": unique, so concurrent
    # workers that each make sure the sweep exists still create one row (migration 0002).
    Column("dedupe_key", String(60), nullable=True),
    # Which worker threads claim it: "mail" (emails, expiry, anything else) or "webhook"
    # (migration 0007; jobs.LANES). Slow webhook receivers cannot occupy the email threads.
    Column("lane", String(10), nullable=False, server_default="mail"),
    # The oldest due job of a lane; the oldest due job per organization (round-robin claim).
    Index("ix_jobs_claim_id", "status", "lane", "run_after", "id"),
    Index("ix_jobs_lane_org", "status", "lane", "organization_id", "run_after"),
    Index("ix_jobs_reward", "reward_id"),
    Index("uq_jobs_dedupe_key", "dedupe_key", unique=True),
)
