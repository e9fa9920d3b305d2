"""Queries for orders and rewards, always scoped to the caller's organization."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import (
    Connection,
    DateTime,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
)
from sqlalchemy.orm import aliased

from largesse import db, paging
from largesse.errors import NotFound
from largesse.orders.models import PENDING_APPROVAL, orders, reward_field_values, rewards
from largesse.orders.wire import REWARD_WIRE_COLUMNS, field_value_wire, order_to_wire, reward_to_wire, reward_wire
from largesse.redemption.models import payouts
from largesse.timeutil import utcnow

# Built once (SQLAlchemy memoizes a statement's cache key on the object): a page sends these
# with its reward IDs, one statement for the page's field values and one for its payouts.
_FIELD_VALUES = (
    select(reward_field_values.c.reward_id, reward_field_values.c.field_id, reward_field_values.c.label,
           reward_field_values.c.value)
    .where(reward_field_values.c.reward_id.in_(bindparam("ids", expanding=True)))
    .order_by(reward_field_values.c.label, reward_field_values.c.field_id)
)
_REDEEMED_PRODUCTS = (
    select(payouts.c.reward_id, payouts.c.product_id).where(payouts.c.reward_id.in_(bindparam("ids", expanding=True)))
)

# The columns of rewards the wire form reads (wire.REWARD_WIRE_COLUMNS, in order): what list
# queries select, so that their rows feed wire.reward_wire positionally.
REWARD_WIRE = tuple(rewards.c[name] for name in REWARD_WIRE_COLUMNS)

_ORDERS_REWARDS = (
    select(*REWARD_WIRE).where(rewards.c.order_id.in_(bindparam("ids", expanding=True)))
    .order_by(rewards.c.created_at, rewards.c.id)
)


def field_values_for(conn: Connection, reward_ids: list[str]) -> dict[str, list[dict]]:
    """{reward_id: its custom field values in wire form, by label}: one query."""
    out: dict[str, list[dict]] = defaultdict(list)
    if not reward_ids:
        return out
    for reward_id, field_id, label, value in conn.execute(_FIELD_VALUES, {"ids": reward_ids}).all():
        out[reward_id].append(field_value_wire(field_id, value, label))
    return out


def redeemed_products_for(conn: Connection, rows) -> dict[str, str]:
    """{reward_id: chosen product} for the redeemed rewards among rows: one query, or none."""
    redeemed = [r.id for r in rows if r.status == "REDEEMED"]
    if not redeemed:
        return {}
    return dict(conn.execute(_REDEEMED_PRODUCTS, {"ids": redeemed}).all())


def rewards_to_wire(conn: Connection, rows, *, created_format: str = "iso8601") -> list[dict]:
    """Rewards in wire form from rows of any query selecting the REWARD_WIRE columns: two queries at most."""
    if not rows:
        return []
    values = field_values_for(conn, [r.id for r in rows])
    chosen = redeemed_products_for(conn, rows)
    now = utcnow()  # one clock reading for the page (wire: an expired reward reads EXPIRED)
    return _not_expired_while_waiting(conn, [
        reward_to_wire(r, values.get(r.id, []), created_format=created_format, redeemed_product_id=chosen.get(r.id),
                       now=now) for r in rows])


def _not_expired_while_waiting(conn: Connection, wire: list[dict]) -> list[dict]:
    """The wire form reads a reward past its expires_at as EXPIRED (lifecycle.status), but the
    rewards of an order waiting for approval do not expire: their expiry starts over at
    approval, and the sweep skips them. The wire form does not know the order's status, so the
    page asks for it here: one query, and only when the page shows an EXPIRED reward (the sweep
    never stores EXPIRED on a waiting order's reward, so each such one is the time rule's)."""
    expired = [w for w in wire if "redemption" in w and w["redemption"]["status"] == "EXPIRED"]
    if expired:
        waiting = set(conn.execute(select(orders.c.id).where(
            orders.c.id.in_({w["order_id"] for w in expired}), orders.c.status == PENDING_APPROVAL)).scalars())
        for reward in expired:
            if reward["order_id"] in waiting:
                del reward["redemption"]
    return wire


def orders_to_wire(conn: Connection, order_rows) -> list[dict]:
    ids = [o.id for o in order_rows]
    if not ids:
        return []
    reward_rows = conn.execute(_ORDERS_REWARDS, {"ids": ids}).all()
    wire = rewards_to_wire(conn, reward_rows)
    by_order: dict[str, list[dict]] = defaultdict(list)
    for row, reward in zip(reward_rows, wire, strict=True):
        by_order[row.order_id].append(reward)
    return [order_to_wire(o, by_order.get(o.id, [])) for o in order_rows]


def get_order(conn: Connection, org: str, id_or_external_id: str):
    rows = conn.execute(
        select(orders).where(
            orders.c.organization_id == org,
            or_(orders.c.id == id_or_external_id, orders.c.external_id == id_or_external_id),
        )
    ).all()
    if not rows:
        return None
    # An order's own ID wins over another order's external_id that happens to be equal.
    return next((r for r in rows if r.id == id_or_external_id), rows[0])


def order_or_404(conn: Connection, org: str, id_or_external_id: str):
    """get_order, or 404. An unknown value is named only when printable: an external_id may hold
    format characters (bidi marks), which no error message echoes."""
    row = get_order(conn, org, id_or_external_id)
    if row is None:
        named = f" {id_or_external_id}" if id_or_external_id.isprintable() else ""
        raise NotFound(f"Order{named} not found", {"id": ["not found"]})
    return row


def list_orders(conn: Connection, org: str, *, offset: int, limit: int, campaign_id: str | None,
                external_id: str | None, created_gte: datetime | None, created_lte: datetime | None):
    """(the page's orders, newest first; the bounded total_count, as GET /rewards counts).

    An exact count walked every order of the organization: with 100,000 orders on PostgreSQL
    right after a bulk load, 10-15 ms for the count and 24-28 ms for a page planned as a bitmap
    scan and a sort (docs/benchmarks.md). The page walks ix_orders_org_created_id (by campaign,
    ix_orders_org_campaign_created_id), which ends with the list's order, and stops after offset
    + limit orders (db.index_walks); on (organization_id, created_at) alone both planners sorted
    every order (migration 0028)."""
    return _ORDER_LIST.page(conn, {"org": org, "campaign_id": campaign_id, "external_id": external_id,
                                   "created_gte": created_gte, "created_lte": created_lte}, offset=offset, limit=limit)


_ORDER_LIST = paging.Listing(
    orders, orders.c.organization_id == bindparam("org"), {
        "campaign_id": orders.c.campaign_id == bindparam("campaign_id"),
        "external_id": orders.c.external_id == bindparam("external_id"),
        "created_gte": orders.c.created_at >= bindparam("created_gte"),
        "created_lte": orders.c.created_at <= bindparam("created_lte"),
    }, order_by=(orders.c.created_at.desc(), orders.c.id.desc()))


def get_reward(conn: Connection, org: str, reward_id: str):
    return conn.execute(
        select(rewards).where(rewards.c.organization_id == org, rewards.c.id == reward_id)
    ).first()


def search_rewards(conn: Connection, org: str, *, filters: list[tuple[str, str]], offset: int, limit: int,
                   created_format: str = "iso8601") -> tuple[list[dict], int]:
    """(the page's rewards in wire form, the bounded total_count): the organization's rewards
    newest first; with filters, those whose custom field values match every (label, value)
    pair exactly.

    The list walks ix_rewards_org_created_id backwards; a search walks the ix_rfv_search index
    of its first pair in list order and probes the others by primary key; either stops after
    offset + limit entries, so its cost follows the page, not the size of the table, and its
    plan needs no statistics (db.index_walks). One statement answers the page: its rewards,
    their custom field values and redeemed products, and (no label or one) the count of the
    matches past the offset (bounded_count); a page past the end counts once more. With
    several labels the count examines the first label's entries after the page instead
    (_count_ahead). The statements are built once per number of labels.
    """
    db.index_walks(conn)
    search = _search_statements(len(filters), conn.dialect.name == "postgresql")
    params: dict = {"org": org, "offset": offset, "limit": limit, **paging.count_params(offset)}
    for i, (label, value) in enumerate(filters):
        params[f"label{i}"], params[f"value{i}"] = label, value
    rows = conn.execute(search.page, params).all()
    wire = _not_expired_while_waiting(conn, _page_to_wire(rows, created_format == "spec"))
    if search.ahead is None:
        total = paging.bounded_count(conn, search.counts, offset, params, seen=rows[0][-1] if rows else 0)
    elif len(wire) < limit:
        total = paging.page_total(conn, search.counts, params, offset=offset, limit=limit, page_len=len(wire))
    else:
        total = offset + len(wire) + _count_ahead(conn, search.ahead, params, rows[-1])
    return wire, total


def _count_ahead(conn: Connection, ahead, params: dict, last_row) -> int:
    """How many matches follow a full page of a search with several labels, at a cost bounded
    by COUNT_HORIZON: the matches among the next COUNT_HORIZON + 1 entries of the first label,
    exact when the entries end there. Otherwise a lower bound, and at least 1 (when none of
    them matched), so that a client paging until offset >= total_count asks for the next page
    (docs/api.md, "total_count at scale").

    Counting a window of matches instead, as bounded_count does, probes the other labels for
    COUNT_HORIZON / (their share of the first label's rewards) entries: 4,000 for a 25 % share,
    3 ms of SQLite's CPU per page at 100,000 rewards (docs/benchmarks.md), and without bound
    for a rare combination."""
    walked, matched = conn.execute(ahead, {**params, "after_created": last_row[_CREATED], "after_id": last_row[0],
                                           "ahead_window": paging.COUNT_HORIZON + 1}).one()
    return max(matched, 1) if walked > paging.COUNT_HORIZON else matched


def _with_values(page, window_count):
    """page (a select of the REWARD_WIRE columns, newest first, limited) as one row per reward
    and custom field value (none: one row of NULLs), plus the redeemed product and the count of
    bounded_count's window (an uncorrelated subquery: evaluated once; None: a NULL column)."""
    p = page.subquery("page")
    values = reward_field_values
    return (
        select(*p.c, values.c.field_id, values.c.label, values.c.value, payouts.c.product_id,
               null() if window_count is None else window_count.scalar_subquery())
        .select_from(
            p.outerjoin(values, values.c.reward_id == p.c.id)
            .outerjoin(payouts, and_(payouts.c.reward_id == p.c.id, p.c.status == "REDEEMED")))
        .order_by(p.c.created_at.desc(), p.c.id.desc(), values.c.label, values.c.field_id)
    )


_N = len(REWARD_WIRE_COLUMNS)
_CREATED = REWARD_WIRE_COLUMNS.index("created_at")


def _page_to_wire(rows, spec: bool) -> list[dict]:
    out: list[dict] = []
    last = fields = None
    now = utcnow()  # one clock reading for the page (wire: an expired reward reads EXPIRED)
    for row in rows:
        if row[0] != last:
            last, fields = row[0], []
            out.append(reward_wire(row[:_N], fields, spec, None, row[_N + 3], now=now))
        if row[_N] is not None:
            fields.append(field_value_wire(row[_N], row[_N + 2], row[_N + 1]))
    return out


class _Search(NamedTuple):
    counts: tuple  # bounded_count's statements (count_statements)
    page: Select  # the page, as _with_values rows
    ahead: Select | None  # several labels: _count_ahead's statement


_searches: dict[tuple[int, bool], _Search] = {}


def _search_statements(labels: int, postgresql: bool) -> _Search:
    """The statements of a search of `labels` (label, value) pairs."""
    built = _searches.get((labels, postgresql))
    if built is not None:
        return built
    org = bindparam("org")
    ahead = None
    if not labels:
        matching = select(rewards.c.id).where(rewards.c.organization_id == org)
        page = (select(*REWARD_WIRE).where(rewards.c.organization_id == org)
                .order_by(rewards.c.created_at.desc(), rewards.c.id.desc()))
    else:
        first = aliased(reward_field_values, name="first")
        conditions = [first.c.organization_id == org, first.c.label == bindparam("label0"),
                      first.c.value == bindparam("value0")]
        probes = []
        for i in range(1, labels):
            # Every column of ix_rfv_search is pinned (reward_created_at is copied identically
            # into each of a reward's rows), so each probe is one index-only point lookup.
            other = aliased(reward_field_values, name=f"other{i}")
            probe = select(literal(1)).where(
                other.c.organization_id == org, other.c.label == bindparam(f"label{i}"),
                other.c.value == bindparam(f"value{i}"),
                other.c.reward_created_at == first.c.reward_created_at, other.c.reward_id == first.c.reward_id,
            )
            if postgresql:
                # OFFSET 0 keeps PostgreSQL from turning the EXISTS into a semi join: evaluated per row,
                # the probe is an index lookup on every column whatever the statistics say. Without
                # statistics (right after a bulk load) the semi join scanned every value of the label
                # per row: 1.4 s instead of milliseconds at 10,000 rewards. SQLite always probes per
                # row, and an OFFSET makes its probe a third slower.
                probe = probe.offset(0)
            probes.append(exists(probe))
        newest_first = (first.c.reward_created_at.desc(), first.c.reward_id.desc())
        matching = select(first.c.reward_id).where(*conditions, *probes)
        page = (select(*REWARD_WIRE).select_from(first).join(rewards, rewards.c.id == first.c.reward_id)
                .where(*conditions, *probes).order_by(*newest_first))
        if probes:
            # The first label's next entries after the page, each with whether it matches.
            after = tuple_(first.c.reward_created_at, first.c.reward_id) < tuple_(
                bindparam("after_created", type_=DateTime), bindparam("after_id"))
            window = (select(case((and_(*probes), 1)).label("matched")).where(*conditions, after)
                      .order_by(*newest_first).limit(bindparam("ahead_window", type_=Integer)).subquery())
            ahead = select(func.count(), func.count(window.c.matched))
    counts = paging.count_statements(matching)
    page = _with_values(page.offset(bindparam("offset", type_=Integer)).limit(bindparam("limit", type_=Integer)),
                        counts[0] if ahead is None else None)
    built = _searches[(labels, postgresql)] = _Search(counts, page, ahead)
    return built
