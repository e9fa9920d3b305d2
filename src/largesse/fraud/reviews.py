"""Reviews of held redemptions: list, get, release (pay), block (cancel and refund).

See fraud/service.py's docstring for why exactly one of release, block, a client's cancel
and the expiry sweep wins for a given reward.
"""

from __future__ import annotations

from sqlalchemy import Connection, DateTime, Engine, bindparam, or_, select, update

from largesse import db, paging
from largesse.catalog.models import products
from largesse.config import Settings
from largesse.errors import NotFound, Unprocessable
from largesse.fraud.models import fraud_reviews, redemption_signals
from largesse.fraud.service import BLOCKED, FLAGGED, REDEMPTION_METHODS, RELATED_LIMIT, RELEASED
from largesse.money import to_wire as money
from largesse.orders import lifecycle
from largesse.orders.models import rewards
from largesse.orders.repository import rewards_to_wire
from largesse.timeutil import iso, utcnow

_COLUMNS = (fraud_reviews, products.c.category.label("product_category"))


def _base(org: str):
    return (select(*_COLUMNS).select_from(
        fraud_reviews.outerjoin(products, products.c.id == fraud_reviews.c.product_id))
        .where(fraud_reviews.c.organization_id == org))


def _item(row, reward_wire: dict) -> dict:
    wire = {
        "status": row.status, "reasons": list(row.reasons), "redemption_method":
            REDEMPTION_METHODS.get(row.product_category or ""),
        "redeemed_at": iso(row.redeemed_at),
        "geo": {k: v for k, v in (("ip", row.ip), ("country", row.country)) if v is not None},
        "reward": reward_wire,
    }
    if row.device_id:
        wire["device_id"] = row.device_id
    if row.status != FLAGGED:
        wire["reviewed_by"] = row.reviewed_by
        wire["reviewed_at"] = iso(row.reviewed_at)
    return {k: v for k, v in wire.items() if v is not None}


def _rewards_wire(conn: Connection, ids: list[str]) -> dict[str, dict]:
    if not ids:
        return {}
    rows = conn.execute(select(rewards).where(rewards.c.id.in_(ids))).all()
    return {w["id"]: w for w in rewards_to_wire(conn, rows)}


def list_reviews(conn: Connection, org: str, *, offset: int, limit: int, status: str | None, created_gte=None,
                 created_lte=None, redeemed_gte=None, redeemed_lte=None) -> tuple[list[dict], int]:
    """Reviews newest redemption first, with total_count (bounded, as every list counts:
    paging.bounded_count); created_at filters apply to the reward.

    The page walks ix_fraud_reviews_org_redeemed_id (with a status, ..._status_redeemed_id)
    and stops after offset + limit reviews, whatever the planner knows (db.index_walks); a
    created_at filter looks up each walked review's reward by its key, and only the page's
    reviews are joined to their product. Before, the exact count, the join to every review's
    reward and the sort took 20-330 ms at 100,000 reviews (docs/benchmarks.md)."""
    rows, total = _REVIEWS.page(conn, {"org": org, "status": status, "created_gte": created_gte,
                                       "created_lte": created_lte, "redeemed_gte": redeemed_gte,
                                       "redeemed_lte": redeemed_lte}, offset=offset, limit=limit)
    wires = _rewards_wire(conn, [r.reward_id for r in rows])
    return [_item(r, wires.get(r.reward_id)) for r in rows], total


# The reward's created_at: its copy on the review (migration 0022), read in the list's index walk.
_REWARD_CREATED = fraud_reviews.c.reward_created_at

_REVIEWS = paging.Listing(
    fraud_reviews, fraud_reviews.c.organization_id == bindparam("org"), {
        "status": fraud_reviews.c.status == bindparam("status"),
        "created_gte": _REWARD_CREATED >= bindparam("created_gte", type_=DateTime),
        "created_lte": _REWARD_CREATED <= bindparam("created_lte", type_=DateTime),
        "redeemed_gte": fraud_reviews.c.redeemed_at >= bindparam("redeemed_gte"),
        "redeemed_lte": fraud_reviews.c.redeemed_at <= bindparam("redeemed_lte"),
    }, order_by=(fraud_reviews.c.redeemed_at.desc(), fraud_reviews.c.reward_id.desc()),
    key=fraud_reviews.c.reward_id, count_in_order=True,
    joined=select(*_COLUMNS).select_from(
        fraud_reviews.outerjoin(products, products.c.id == fraud_reviews.c.product_id)))


def _row_or_404(conn: Connection, org: str, reward_id: str):
    row = conn.execute(_base(org).where(fraud_reviews.c.reward_id == reward_id)).first()
    if row is None:
        raise NotFound(f"Fraud review {reward_id} not found", {"id": ["not found"]})
    return row


def related_rewards(conn: Connection, org: str, reward_id: str) -> dict:
    """Other rewards of the organization redeemed from the same address, device or email."""
    s = redemption_signals
    me = conn.execute(select(s).where(s.c.reward_id == reward_id)).first()
    currency = conn.execute(select(rewards.c.currency_code).where(rewards.c.id == reward_id)).scalar_one()
    links = []
    if me is not None:
        links = [column == value for column, value in ((s.c.ip, me.ip), (s.c.device_id, me.device_id),
                                                       (s.c.email, me.email)) if value]
    rows = []
    if links:
        rows = conn.execute(
            select(rewards.c.id, rewards.c.denomination_cents, rewards.c.currency_code, fraud_reviews.c.status)
            .select_from(s.join(rewards, rewards.c.id == s.c.reward_id)
                         .outerjoin(fraud_reviews, fraud_reviews.c.reward_id == s.c.reward_id))
            .where(s.c.organization_id == org, s.c.reward_id != reward_id, or_(*links))
            .order_by(s.c.created_at.desc()).limit(RELATED_LIMIT)).all()
    return {
        "ids": [r.id for r in rows], "count": len(rows), "blocked_count": sum(r.status == BLOCKED for r in rows),
        "aggregated_value": money(_in_currency(conn, rows, currency)), "currency_code": currency,
    }


def _in_currency(conn: Connection, rows, currency: str) -> int:
    """The rewards' values added up in `currency` (hundredths): others converted at today's rates
    (forex), a currency without a rate left out. Rates are read only when some reward needs one."""
    from largesse.forex import service as forex

    total, rates = 0, None
    for row in rows:
        if row.currency_code == currency:
            total += row.denomination_cents
            continue
        rates = rates if rates is not None else forex.current(conn)
        total += forex.convert_between(rates, row.denomination_cents, row.currency_code, currency) or 0
    return total


def get_review(conn: Connection, org: str, reward_id: str) -> dict:
    row = _row_or_404(conn, org, reward_id)
    wire = _item(row, _rewards_wire(conn, [reward_id]).get(reward_id))
    wire["risk"] = row.risk
    wire["related_rewards"] = related_rewards(conn, org, reward_id)
    return wire


def _decide(conn: Connection, org: str, reward_id: str, status: str, key_id: str):
    """The gate: flagged -> status, once. (row, decision time) for the request that decides;
    (row, None) when the review already has this very status (a repeated release or block:
    nothing more to do); 422 naming the decision when it has the other one."""
    row = _row_or_404(conn, org, reward_id)
    now = utcnow()
    # The decision erases the recipient details kept while held (`row` still has them for release).
    won = conn.execute(update(fraud_reviews)
                       .where(fraud_reviews.c.reward_id == reward_id, fraud_reviews.c.status == FLAGGED)
                       .values(status=status, reviewed_by=key_id, reviewed_at=now, encrypted_details=None)
                       ).rowcount
    if not won:
        current = conn.execute(select(fraud_reviews.c.status).where(fraud_reviews.c.reward_id == reward_id)).scalar()
        if current == status:
            return row, None
        raise Unprocessable(f"Fraud review {reward_id} was already {current}", {"id": [f"is already {current}"]})
    return row, now


def release(engine: Engine, settings: Settings, *, org: str, reward_id: str, key_id: str) -> dict:
    """Pay the product the recipient chose, once, through the normal redemption path. Releasing
    a released review again answers it as it is (no second payout, event or ledger entry).

    A bank deposit is paid to the account the recipient gave, kept encrypted on the review while
    held: decrypted here, handed to the provider, and erased by _decide's UPDATE in this same
    transaction (a refusal below rolls all of it back: the review stays flagged with them)."""
    from largesse.redemption import recipient
    from largesse.redemption import service as redemption
    from largesse.redemption.providers import DetailsRequired, OutOfStock

    with db.write(engine) as conn:
        row, now = _decide(conn, org, reward_id, RELEASED, key_id)
        if now is None:
            return get_review(conn, org, reward_id)
        if not lifecycle.close(conn, reward_id, status="REDEEMED", at=now):
            state = lifecycle.status(conn.execute(select(rewards).where(rewards.c.id == reward_id)).first(), at=now)
            raise Unprocessable(f"Reward {reward_id} is {state.lower()}; it cannot be released",
                                {"id": [f"reward is {state.lower()}"]})
        reward = conn.execute(select(rewards).where(rewards.c.id == reward_id)).first()
        product = conn.execute(select(products).where(products.c.id == row.product_id)).first()
        reason = redemption.why_unavailable(conn, reward, product, settings)
        if reason:
            raise Unprocessable(f"The chosen product cannot be issued: {reason}", {"id": [reason]})
        details = None
        if row.encrypted_details is not None:
            try:
                details = recipient.unseal(row.encrypted_details, settings)
            except recipient.Unreadable as exc:
                raise Unprocessable(f"The recipient's bank details cannot be read: {exc}; release it once the "
                                    "secret is back, or block it", {"id": ["recipient's details cannot be read"]}
                                    ) from None
        try:
            redemption.pay(conn, reward=reward, product=product, settings=settings, at=now, details=details)
        except OutOfStock:
            raise Unprocessable("The chosen product is out of stock", {"id": ["product out of stock"]}) from None
        except DetailsRequired:  # held before migration 0027: the account it was given was not kept
            raise Unprocessable("The chosen product pays to a bank account the recipient gives on the page, and "
                                "none was kept for this review; it cannot be released",
                                {"id": ["product needs the recipient's bank details"]}) from None
        return get_review(conn, org, reward_id)


def block(engine: Engine, *, org: str, reward_id: str, key_id: str) -> dict:
    """Cancel the reward as the client's cancel does, once (delivery.service.cancel_in, the one
    cancel rule: refund, queued deliveries dropped, its order CANCELED when every reward of it
    is, REWARDS.CANCELED and ORDERS.CANCELED), whatever its delivery status. Blocking a blocked
    review again answers it as it is (no second refund or event)."""
    from largesse.delivery import service as delivery

    with db.write(engine) as conn:
        _, now = _decide(conn, org, reward_id, BLOCKED, key_id)
        if now is not None:
            reward = conn.execute(select(rewards).where(rewards.c.id == reward_id)).first()
            delivery.cancel_in(conn, reward, at=now, memo=f"reward {reward_id} blocked in fraud review",
                               why="reward blocked in fraud review")
        # When cancel_in closes nothing, it was blocked already (a repeated request), or the client
        # canceled it, or it expired: that already refunded it (or the expiry sweep will); the
        # review still records the decision.
        return get_review(conn, org, reward_id)
