"""Read queries for people browsing orders and rewards (the dashboard), scoped to the org.

Lists are paged in the database by keyset, newest first, and never counted: a page starts
below the (created_at, id) of the previous page's last row (`before`) and asks for one row
more than it shows to know whether there is a next page, so its cost follows the page size,
not the number of rewards in the organization nor how deep the page is (an OFFSET would
walk every row above it). docs/dashboard.md has the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, case, exists, func, or_, select, tuple_
from sqlalchemy.orm import aliased

from largesse.delivery.models import jobs
from largesse.orders.lifecycle import NOT_WAITING_FOR_APPROVAL, overdue
from largesse.orders.models import PENDING_APPROVAL, orders, reward_field_values, rewards
from largesse.redemption.models import payouts, redemption_tokens
from largesse.timeutil import utcnow

REWARD_STATUSES = ("ACTIVE", "REDEEMED", "CANCELED", "EXPIRED")
DELIVERY_STATUSES = ("PENDING", "SCHEDULED", "SUCCEEDED", "FAILED")


Cursor = tuple[datetime, str]  # (created_at, id) of the last row of the previous page


def cursor_of(row) -> str:
    return f"{row.created_at.isoformat()}~{row.id}"


def parse_cursor(text: str) -> Cursor | None:
    when, _, row_id = (text or "").partition("~")
    try:
        return (datetime.fromisoformat(when), row_id) if row_id and len(row_id) <= 64 else None
    except ValueError:
        return None


@dataclass
class RewardFilter:
    status: str | None = None  # one of REWARD_STATUSES
    delivery_status: str | None = None
    campaign_id: str | None = None
    created_gte: datetime | None = None
    created_lt: datetime | None = None
    fields: list[tuple[str, str]] = field(default_factory=list)  # (label, value), all must match
    recipient_email: str | None = None  # the whole address, in any capitals


# A reward's status as the API shows it (lifecycle.effective): an ACTIVE reward past its expiry
# reads EXPIRED before the sweep has stored it, unless its order waits for approval
# (lifecycle.overdue). Pages select it as `shown_status` and filter by it, so a list, its filter
# and the reward's page agree.

def _shown_status(at: datetime):
    return case((overdue(at), "EXPIRED"), else_=rewards.c.status).label("shown_status")


OVERDUE_CAP = 2_000


def _overdue_of(conn: Connection, org: str, at: datetime) -> list | None:
    """(id, created_at) of the organization's overdue rewards: those the expiry sweep has yet to
    store as EXPIRED (a minute's worth, unless no worker runs). Read through ix_rewards_expiry
    alone (no organization in the query: with one, a planner may walk the organization's
    ACTIVE rewards instead, every one of them when none is overdue). None past OVERDUE_CAP in
    all: the callers then put the rule in their queries, exact at the cost of that walk."""
    # The candidates first, without the approval probe: a waiting order's rewards keep an
    # expires_at the sweep never acts on, and a NOT EXISTS before the LIMIT would walk all of
    # them (a 50,000-reward CSV order left waiting: 50,000 entries and probes on every page).
    rows = conn.execute(select(rewards.c.id, rewards.c.organization_id, rewards.c.created_at, rewards.c.order_id)
                        .where(rewards.c.status == "ACTIVE", rewards.c.expires_at <= at)
                        .limit(OVERDUE_CAP + 1)).all()
    if len(rows) > OVERDUE_CAP:
        return None
    ours = [row for row in rows if row.organization_id == org]
    if not ours:
        return []
    waiting = set(conn.execute(select(orders.c.id).where(
        orders.c.id.in_({row.order_id for row in ours}), orders.c.status == PENDING_APPROVAL)).scalars())
    return [(row.id, row.created_at) for row in ours if row.order_id not in waiting]


def _status_conditions(conn: Connection, org: str, status: str | None, at: datetime) -> list[list]:
    """The condition lists whose matches, together, are the rewards shown with `status`: one
    list, or for EXPIRED two (stored, and overdue), each walked in the list's order."""
    if status not in ("ACTIVE", "EXPIRED"):
        return [[rewards.c.status == status] if status else []]
    late = _overdue_of(conn, org, at)
    ids = [reward_id for reward_id, _ in late or ()]
    if status == "ACTIVE":
        if late is None:
            return [[rewards.c.status == "ACTIVE",
                     or_(rewards.c.expires_at.is_(None), rewards.c.expires_at > at, ~NOT_WAITING_FOR_APPROVAL)]]
        return [[rewards.c.status == "ACTIVE"] + ([rewards.c.id.not_in(ids)] if ids else [])]
    stored = [rewards.c.status == "EXPIRED"]
    if late is None:
        return [stored, [overdue(at)]]
    return [stored, [rewards.c.id.in_(ids), overdue(at)]] if ids else [stored]


def page_rewards(conn: Connection, org: str, flt: RewardFilter, *, before: Cursor | None, limit: int):
    """(rows, has_more): rewards newest first matching flt, below the cursor `before`.

    With a custom field filter the walk starts from the field index instead (as the API's
    search does, orders/repository.search_rewards): its entries are in the list's order, so
    the page reads about `limit` index entries and rewards rows by primary key, where a walk
    of the rewards probing each one's values could read every reward of the organization.
    A recipient's rewards are one range of ix_rewards_org_email_created, in the list's order.
    """
    at = utcnow()
    conditions = []
    if flt.recipient_email:
        # lower() of the database on both sides: the index's own expression (SQLite's is ASCII only).
        conditions.append(func.lower(rewards.c.recipient_email) == func.lower(flt.recipient_email))
    if flt.delivery_status:
        conditions.append(rewards.c.delivery_status == flt.delivery_status)
    if flt.campaign_id:
        conditions.append(rewards.c.campaign_id == flt.campaign_id)
    if flt.created_gte:
        conditions.append(rewards.c.created_at >= flt.created_gte)
    if flt.created_lt:
        conditions.append(rewards.c.created_at < flt.created_lt)
    if flt.fields:
        first = aliased(reward_field_values)
        (label, value), rest = flt.fields[0], flt.fields[1:]
        conditions += [first.c.organization_id == org, first.c.label == label, first.c.value == value,
                       rewards.c.organization_id == org]
        for other_label, other_value in rest:
            other = aliased(reward_field_values)
            conditions.append(exists().where(
                other.c.organization_id == org, other.c.label == other_label, other.c.value == other_value,
                other.c.reward_created_at == first.c.reward_created_at, other.c.reward_id == first.c.reward_id))
        order = (first.c.reward_created_at, first.c.reward_id)
        statement = (select(rewards, _shown_status(at)).select_from(first)
                     .join(rewards, rewards.c.id == first.c.reward_id))
    else:
        conditions.append(rewards.c.organization_id == org)
        order = (rewards.c.created_at, rewards.c.id)
        statement = select(rewards, _shown_status(at))
    if before is not None:
        conditions.append(tuple_(*order) < tuple_(*before))
    rows = []
    for status_conditions in _status_conditions(conn, org, flt.status, at):
        rows += conn.execute(statement.where(and_(*conditions, *status_conditions))
                             .order_by(order[0].desc(), order[1].desc()).limit(limit + 1)).all()
    rows.sort(key=lambda row: (row.created_at, row.id), reverse=True)  # two walks (EXPIRED) merged
    return rows[:limit], len(rows) > limit


def page_order_rewards(conn: Connection, order_id: str, *, before: Cursor | None, limit: int):
    """(rows, has_more): one order's rewards, newest first, through ix_rewards_order (an order
    has at most a few thousand). The caller has checked that the order is the organization's."""
    conditions = [rewards.c.order_id == order_id]
    if before is not None:
        conditions.append(tuple_(rewards.c.created_at, rewards.c.id) < tuple_(*before))
    rows = conn.execute(select(rewards, _shown_status(utcnow())).where(*conditions)
                        .order_by(rewards.c.created_at.desc(), rewards.c.id.desc()).limit(limit + 1)).all()
    return rows[:limit], len(rows) > limit


def page_orders(conn: Connection, org: str, *, campaign_id: str | None, created_gte: datetime | None,
                created_lt: datetime | None, before: Cursor | None, limit: int):
    """(rows, has_more): orders newest first below the cursor."""
    conditions = [orders.c.organization_id == org]
    if before is not None:
        conditions.append(tuple_(orders.c.created_at, orders.c.id) < tuple_(*before))
    if campaign_id:
        conditions.append(orders.c.campaign_id == campaign_id)
    if created_gte:
        conditions.append(orders.c.created_at >= created_gte)
    if created_lt:
        conditions.append(orders.c.created_at < created_lt)
    # No per-order reward count: its cost would follow the orders' sizes (5,000 rewards each from
    # a CSV), not the page's. An order's page lists its rewards.
    rows = conn.execute(select(orders).where(and_(*conditions))
                        .order_by(orders.c.created_at.desc(), orders.c.id.desc()).limit(limit + 1)).all()
    return rows[:limit], len(rows) > limit


COUNT_CAP = 10_000


def status_counts(conn: Connection, org: str, *, since: datetime) -> dict[str, int]:
    """{status as shown: rewards created since `since`}, each counted up to COUNT_CAP + 1 (a page
    shows "more than 10,000"): index-only range scans of ix_rewards_org_status_created_id whose
    cost is bounded whatever the organization's volume (a full count of 100,000 index entries
    alone took most of the 50 ms budget), then the overdue rewards move from ACTIVE to EXPIRED."""
    at = utcnow()
    counts = {status: conn.execute(_COUNT_SINCE, {"org": org, "status": status, "since": since}).scalar_one()
              for status in REWARD_STATUSES}
    late = _overdue_of(conn, org, at)
    if late is None:
        moved = conn.execute(select(func.count()).select_from(select(rewards.c.id).where(
            rewards.c.organization_id == org, rewards.c.created_at >= since, overdue(at))
            .limit(COUNT_CAP + 1).subquery())).scalar_one()
    else:
        moved = sum(1 for _, created_at in late if created_at >= since)
    if counts["ACTIVE"] <= COUNT_CAP:  # else "more than 10,000" still
        counts["ACTIVE"] -= min(moved, counts["ACTIVE"])
    counts["EXPIRED"] = min(counts["EXPIRED"] + moved, COUNT_CAP + 1)
    return counts


_COUNT_SINCE = select(func.count()).select_from(
    select(rewards.c.created_at).where(  # a column of the index: no table row is read
        rewards.c.organization_id == bindparam("org"), rewards.c.status == bindparam("status"),
        rewards.c.created_at >= bindparam("since")).limit(COUNT_CAP + 1).subquery())


@dataclass
class RewardHistory:
    deliveries: list  # delivery jobs of the reward, oldest first
    links: list  # redemption tokens issued: created_at, revoked_at (never the token)
    payout: object | None


def history(conn: Connection, reward_id: str) -> RewardHistory:
    """What happened to one reward (the caller has checked it is the organization's)."""
    deliveries = conn.execute(
        select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.last_error, jobs.c.created_at, jobs.c.updated_at)
        .where(jobs.c.reward_id == reward_id, jobs.c.kind == "deliver_reward").order_by(jobs.c.id)).all()
    links = conn.execute(
        select(redemption_tokens.c.created_at, redemption_tokens.c.revoked_at)
        .where(redemption_tokens.c.reward_id == reward_id).order_by(redemption_tokens.c.created_at)).all()
    payout = conn.execute(select(payouts.c.product_id, payouts.c.provider, payouts.c.created_at)
                          .where(payouts.c.reward_id == reward_id)).first()
    return RewardHistory(deliveries, links, payout)
