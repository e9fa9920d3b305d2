"""A reward's redemption lifecycle: ACTIVE until it is redeemed, canceled or expired, once.

Every way out of ACTIVE is one conditional UPDATE here (`close` for a redemption or a
cancel, `expire` for the expiry sweep): whatever races (a recipient redeeming while the
client cancels, two tabs, two workers), exactly one caller changes the row and goes on to
issue the payout or the refund in the same transaction. A reward past its expires_at is
already expired for everyone, even before the sweep has run (`status`).
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Connection, Row, and_, exists, or_, update

from largesse.orders.models import PENDING_APPROVAL, orders, rewards

# Rewards of an order waiting for approval do not expire: the order's total is refunded as a
# whole if it is rejected, and their expiry starts over at approval (orders/approvals.py).
NOT_WAITING_FOR_APPROVAL = ~exists().where(orders.c.id == rewards.c.order_id, orders.c.status == PENDING_APPROVAL)

_STAMP = {"REDEEMED": "redeemed_at", "CANCELED": "canceled_at"}


def overdue(at: datetime):
    """In SQL, the rewards that `effective` reads as EXPIRED while stored ACTIVE: past their
    expiry, their order not waiting for approval. The sweep expires them (delivery.service)."""
    return and_(rewards.c.status == "ACTIVE", rewards.c.expires_at <= at, NOT_WAITING_FOR_APPROVAL)


def close(conn: Connection, reward_id: str, *, status: str, at: datetime, failed_delivery: bool = False) -> bool:
    """ACTIVE and unexpired (and, with `failed_delivery`, its delivery FAILED) -> status (REDEEMED
    or CANCELED); True if this call made the change."""
    condition = [rewards.c.id == reward_id, rewards.c.status == "ACTIVE",
                 or_(rewards.c.expires_at.is_(None), rewards.c.expires_at > at)]
    if failed_delivery:
        condition.append(rewards.c.delivery_status == "FAILED")
    return conn.execute(update(rewards).where(*condition).values(status=status, **{_STAMP[status]: at})).rowcount == 1


def expire(conn: Connection, reward_id: str, *, at: datetime) -> Row | None:
    """ACTIVE and past expires_at -> EXPIRED; the reward's row if this call made the change."""
    return conn.execute(
        update(rewards)
        .where(rewards.c.id == reward_id, overdue(at))
        .values(status="EXPIRED").returning(*rewards.c)
    ).first()


def status(reward, *, at: datetime, order_status: str | None = None) -> str:
    """The reward's status as of `at`: an ACTIVE reward past its expiry counts as EXPIRED
    (unless `order_status`, when the caller has it, says the order waits for approval)."""
    return effective(reward.status, reward.expires_at, at=at, order_status=order_status)


def effective(stored: str, expires_at: datetime | None, *, at: datetime, order_status: str | None = None) -> str:
    """`status` from the columns it reads, for code that holds them apart from a row (the wire
    form reads a reward's columns positionally, orders/wire.py): the API's rewards, the reports'
    reward_status, links, delivery and fraud reviews read a reward's status here.

    Rewards of an order waiting for approval never expire (the sweep skips them,
    NOT_WAITING_FOR_APPROVAL; their expires_at moves at approval): with `order_status` PENDING
    APPROVAL the stored status stands. The API's reward wire form reads it without the order's
    status, and its pages put such a reward back (orders/repository._not_expired_while_waiting);
    links refuse a waiting order's rewards first."""
    if stored == "ACTIVE" and expires_at is not None and expires_at <= at and order_status != PENDING_APPROVAL:
        return "EXPIRED"
    return stored


def delivery_start(method: str, deliver_at: date | None, at: datetime) -> datetime:
    """When a reward created (or approved) at `at` goes to its recipient: the start of its
    deliver_at day when that is later and it is sent (EMAIL, PHONE), else `at`. Its delivery
    job runs then and its expiry counts from then: it cannot expire before it is sent."""
    if method != "LINK" and deliver_at is not None and deliver_at > at.date():
        return datetime.combine(deliver_at, datetime.min.time())
    return at
