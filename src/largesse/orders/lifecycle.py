"""A reward's redemption lifecycle: ACTIVE until it is redeemed, canceled or expired, once.

Every way out of ACTIVE goes through `close`, one conditional UPDATE: whatever races (a
recipient redeeming while the client cancels, two tabs, two workers), exactly one caller sees
True and goes on to issue the payout or the refund in the same transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, or_, update

from largesse.orders.models import rewards

_STAMP = {"REDEEMED": "redeemed_at", "CANCELED": "canceled_at"}


def close(conn: Connection, reward_id: str, *, status: str, at: datetime) -> bool:
    """ACTIVE and unexpired -> status (REDEEMED or CANCELED); True if this call made the change."""
    return conn.execute(
        update(rewards)
        .where(rewards.c.id == reward_id, rewards.c.status == "ACTIVE",
               or_(rewards.c.expires_at.is_(None), rewards.c.expires_at > at))
        .values(status=status, **{_STAMP[status]: at})
    ).rowcount == 1
