"""Reward actions after the order: resend, cancel, generate a link, expire.

Each money-moving change (cancel, expiry) is one write transaction that (1) moves the
reward out of ACTIVE through orders.lifecycle and (2) credits the refund to the balance.
lifecycle's conditional UPDATEs are what make a cancel, an expiry and a redemption
mutually exclusive: exactly one of them changes the row, the others see no row changed. The ledger's unique index on
(reward_id, kind) is the second lock on the door: a refund is credited at most once.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, Engine, bindparam, exists, select, update

from largesse import db, email_address
from largesse.config import Settings
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.errors import Forbidden, Unprocessable
from largesse.funding import service as funding
from largesse.orders import lifecycle
from largesse.orders.models import PENDING_APPROVAL, orders, rewards
from largesse.orders.service import PHONE
from largesse.orgs import service as orgs
from largesse.redemption import tokens
from largesse.timeutil import utcnow
from largesse.webhooks import service as webhooks

log = logging.getLogger("largesse.delivery")

REFUND_KIND = "reward_refund"
EXPIRE_BATCH = 500


def _reward_or_404(conn: Connection, org: str, reward_id: str):
    return db.owned_or_404(conn, rewards, org, reward_id, "Reward")


def refund(conn: Connection, reward, *, memo: str) -> int:
    """Credit the reward's denomination and fee back to the balance that paid for it, in
    the caller's transaction; returns the cents refunded. A second refund of the same
    reward violates the ledger's unique index and aborts the caller's transaction."""
    # A converted order's reward gives back what it was charged, in the balance's currency.
    amount = reward.charged_cents
    if amount is None:
        amount = reward.denomination_cents + reward.fee_cents
    if amount:  # charged nothing (a conversion that rounded to 0, refused since): nothing to give back
        source_id = conn.execute(select(orders.c.funding_source_id).where(orders.c.id == reward.order_id)
                                 ).scalar_one()
        funding.credit(conn, funding_source_id=source_id, organization_id=reward.organization_id,
                       amount_cents=amount, kind=REFUND_KIND, memo=memo, order_id=reward.order_id,
                       reward_id=reward.id)
    # Even of 0: this update's row lock is what serializes concurrent cancels of an order's
    # rewards (cancel_in's last-reward check).
    conn.execute(update(orders).where(orders.c.id == reward.order_id)
                 .values(refund_cents=orders.c.refund_cents + amount))
    return amount


def _forget_held_details(conn: Connection, reward_id: str) -> None:
    """A canceled or expired reward's held redemption (fraud review) keeps no recipient details."""
    from largesse.fraud.service import forget_details

    forget_details(conn, reward_id)


def _drop_queued_deliveries(conn: Connection, reward_id: str, why: str) -> None:
    conn.execute(
        update(jobs).where(jobs.c.reward_id == reward_id, jobs.c.kind == "deliver_reward",
                           jobs.c.status == job_queue.QUEUED)
        .values(status=job_queue.DONE, last_error=why, updated_at=utcnow())
    )


def cancelable(reward, *, order_status: str, any_delivery: bool = False) -> bool:
    """Whether cancel_reward would take this ACTIVE reward now, for pages that offer the action
    (cancel_reward's checks are the rule that counts): not while its order waits for approval
    (rejecting the order refunds it), not once it is past its expiry, even before the sweep has
    stored it (lifecycle.status)."""
    return (order_status != PENDING_APPROVAL and lifecycle.status(reward, at=utcnow()) == "ACTIVE"
            and (any_delivery or reward.delivery_status == "FAILED"))


def cancel_reward(engine: Engine, *, org: str, reward_id: str, any_delivery: bool = False) -> int:
    """Cancel an unredeemed, unexpired reward whose delivery failed and refund it; returns the
    cents refunded. API.md §2.5: "cancel only works on non-expired rewards with a delivery
    failure". With `any_delivery` (Settings.cancel_any_unredeemed), whatever its delivery status
    (docs/delivery.md, "Cancel").
    """
    now = utcnow()
    with db.write(engine) as conn:
        reward = _reward_or_404(conn, org, reward_id)
        if _order_status(conn, reward.order_id) == PENDING_APPROVAL:
            # Its money is held by the order as a whole: rejecting the order refunds it.
            raise Unprocessable(f"Reward {reward_id} cannot be canceled: its order is pending approval; "
                                "reject the order instead", {"id": ["its order is pending approval"]})
        amount = cancel_in(conn, reward, at=now, memo=f"reward {reward_id} canceled",
                           failed_delivery=not any_delivery)
        if amount is None:
            row = conn.execute(select(rewards.c.status, rewards.c.delivery_status, rewards.c.expires_at)
                               .where(rewards.c.id == reward_id)).one()
            if lifecycle.status(row, at=now) == "ACTIVE":
                reason = f"its delivery has not failed (delivery {row.delivery_status})"
            else:
                reason = {"REDEEMED": "it has been redeemed", "CANCELED": "it is already canceled"}.get(
                    row.status, "it has expired")
            raise Unprocessable(f"Reward {reward_id} cannot be canceled: {reason}", {"id": [reason]})
    return amount


def cancel_in(conn: Connection, reward, *, at, memo: str, failed_delivery: bool = False,
              why: str = "reward canceled") -> int | None:
    """The one cancel rule, in the caller's write transaction: the client's cancel
    (cancel_reward) and a blocked fraud review (fraud/reviews.block) both go through it.

    Closes the reward ACTIVE -> CANCELED (lifecycle.close: unexpired, and with `failed_delivery`
    only once its delivery FAILED), credits the refund (`refund`, ledger entry `memo`), drops its
    queued deliveries (`why`), cancels its order when every reward of the order is now canceled,
    and emits REWARDS.CANCELED (and ORDERS.CANCELED). Returns the cents refunded, or None when
    the reward was not closed (redeemed, canceled, expired, its delivery not failed): then
    nothing changed. `reward` is its row, read anywhere in this transaction (the columns
    refund reads do not change)."""
    if not lifecycle.close(conn, reward.id, status="CANCELED", at=at, failed_delivery=failed_delivery):
        return None
    amount = refund(conn, reward, memo=memo)
    _drop_queued_deliveries(conn, reward.id, why)
    _forget_held_details(conn, reward.id)
    events = [("REWARDS.CANCELED", reward.id)]
    # refund() updated the order's row, so concurrent cancels of its rewards queue on that
    # row lock and the last one sees every other reward canceled here.
    if conn.execute(_CANCEL_ORDER_IF_ALL_CANCELED, {"order_id": reward.order_id}).rowcount:
        events.append(("ORDERS.CANCELED", reward.order_id))
    webhooks.emit(conn, reward.organization_id, events)
    return amount


_CANCEL_ORDER_IF_ALL_CANCELED = (
    update(orders)
    .where(orders.c.id == bindparam("order_id"), orders.c.status != "CANCELED",
           ~exists().where(rewards.c.order_id == orders.c.id, rewards.c.status != "CANCELED"))
    .values(status="CANCELED")
)


def _order_status(conn: Connection, order_id: str) -> str:
    return conn.execute(select(orders.c.status).where(orders.c.id == order_id)).scalar_one()


def resendable(reward, *, now=None) -> bool:
    """Whether resend_reward would take this reward now, for pages that offer the action
    (resend_reward's checks and conditional update are the rule that counts): not a LINK
    reward, still active (not past its expiry), and its delivery FAILED."""
    return (reward.delivery_method != "LINK" and lifecycle.status(reward, at=now or utcnow()) == "ACTIVE"
            and reward.delivery_status == "FAILED")


def resend_reward(engine: Engine, settings: Settings, *, org: str, reward_id: str, updated_email: str | None,
                  updated_phone: str | None) -> None:
    """Queue a new delivery of a reward whose delivery FAILED, optionally to a new address."""
    if updated_email is not None and updated_phone is not None:
        raise Unprocessable("Send at most one of updated_email and updated_phone",
                            {"updated_phone": ["cannot be combined with updated_email"]})
    if updated_email is not None:
        updated_email = updated_email.strip()
        if not email_address.valid(updated_email):
            raise Unprocessable("updated_email is not a valid email address",
                                {"updated_email": ["is not a valid email address"]})
    if updated_phone is not None:
        updated_phone = updated_phone.strip()
        if not PHONE.match(updated_phone):
            raise Unprocessable("updated_phone is not a valid phone number (use a + country code)",
                                {"updated_phone": ["is not a valid phone number"]})
    with db.write(engine) as conn:
        reward = _reward_or_404(conn, org, reward_id)
        if updated_email is not None and settings.sandbox and not orgs.member_keys(conn, org, [updated_email]):
            raise Unprocessable("In the sandbox, rewards can only be sent to members of your organization",
                                {"updated_email": ["is not a member of your organization"]})
        method = reward.delivery_method
        if method == "LINK":
            raise Unprocessable("LINK rewards are not delivered by Largesse; use generate_link",
                                {"id": ["is a LINK reward"]})
        if updated_email is not None and method != "EMAIL":
            raise Unprocessable(f"updated_email applies to EMAIL rewards; this one is {method}",
                                {"updated_email": [f"does not apply to {method} delivery"]})
        if updated_phone is not None and method != "PHONE":
            raise Unprocessable(f"updated_phone applies to PHONE rewards; this one is {method}",
                                {"updated_phone": [f"does not apply to {method} delivery"]})
        status = lifecycle.status(reward, at=utcnow())  # past its expiry counts as expired
        if status != "ACTIVE":
            raise Unprocessable(f"Reward {reward_id} is {status.lower()}; it cannot be resent",
                                {"id": [f"is {status.lower()}"]})
        if reward.delivery_status != "FAILED":
            raise Unprocessable(
                f"Only rewards whose delivery failed can be resent; this delivery is {reward.delivery_status}",
                {"id": [f"delivery is {reward.delivery_status}, not FAILED"]})
        values: dict = {"delivery_status": "PENDING", "delivery_error": None}
        if updated_email is not None:
            values["recipient_email"] = updated_email
        if updated_phone is not None:
            values["recipient_phone"] = updated_phone
        changed = conn.execute(
            update(rewards).where(rewards.c.id == reward_id, rewards.c.status == "ACTIVE",
                                  rewards.c.delivery_status == "FAILED").values(**values)
        ).rowcount
        if not changed:
            raise Unprocessable(f"Reward {reward_id} changed meanwhile; it cannot be resent", {"id": ["changed"]})
        job_queue.enqueue(conn, kind="deliver_reward", organization_id=org, reward_id=reward_id)


def _pending_refusal(what: str, order_status: str) -> Forbidden | None:
    if order_status == PENDING_APPROVAL:
        # 403: what generate_reward_link decodes; no link may work before the approval.
        return Forbidden(f"{what}; links are available once the order is approved",
                         {"id": ["its order is pending approval"]})
    return None


def link_refusal(reward, *, order_status: str, now) -> Forbidden | None:
    """Why no link may be issued for this reward now, or None: the one rule of generate_link
    and generate_order_links, and of the dashboard's reward page, which offers "Generate a new
    link" only when it is None. LINK rewards only, not while the order waits for approval, not
    canceled or expired ones (403 again: their link could only say so, 410); a redeemed
    reward's link still shows the payout."""
    if reward.delivery_method != "LINK":
        return Forbidden(f"Links can only be generated for LINK rewards; this one is {reward.delivery_method}",
                         {"id": [f"is delivered by {reward.delivery_method}"]})
    refusal = _pending_refusal(f"Reward {reward.id} belongs to an order pending approval", order_status)
    if refusal is not None:
        return refusal
    status = lifecycle.status(reward, at=now)
    if status in ("CANCELED", "EXPIRED"):
        return Forbidden(f"Reward {reward.id} is {status.lower()}; its links no longer work",
                         {"id": [f"is {status.lower()}"]})
    return None


def generate_link(engine: Engine, settings: Settings, *, org: str, reward_id: str) -> str:
    """A fresh redemption link for a LINK reward. Earlier links stay valid: the one in the
    create response may already be in the recipient's hands (docs/delivery.md)."""
    with db.write(engine) as conn:
        reward = _reward_or_404(conn, org, reward_id)
        refusal = link_refusal(reward, order_status=_order_status(conn, reward.order_id), now=utcnow())
        if refusal is not None:
            raise refusal
        token = tokens.issue(conn, reward_id)
    return tokens.link(settings.public_url, token)


def generate_order_links(engine: Engine, settings: Settings, *, org: str, order_id: str) -> list[tuple]:
    """A fresh redemption link for every ACTIVE LINK reward of an order, in one transaction:
    [(reward row, link)] in the order's reward order. generate_link's rule for each reward
    (link_refusal): the whole order is refused while it waits for approval; canceled and
    expired rewards are left out, and so are redeemed ones (their recipient already used a
    link; generate_link still gives one on request). Earlier links stay valid; only the new
    tokens' hashes are stored. 403 when no reward qualifies."""
    with db.write(engine) as conn:
        order = db.owned_or_404(conn, orders, org, order_id, "Order")
        refusal = _pending_refusal(f"Order {order_id} is pending approval", order.status)
        if refusal is not None:
            raise refusal
        now = utcnow()
        found = conn.execute(select(rewards).where(rewards.c.order_id == order.id, rewards.c.delivery_method == "LINK")
                             .order_by(rewards.c.created_at, rewards.c.id)).all()
        chosen = [r for r in found
                  if r.status != "REDEEMED" and link_refusal(r, order_status=order.status, now=now) is None]
        if not chosen:
            raise Forbidden(f"Order {order_id} has no active LINK reward; there is no link to issue",
                            {"id": ["has no active LINK reward"]})
        issued = tokens.issue_many(conn, [r.id for r in chosen])
    return [(r, tokens.link(settings.public_url, issued[r.id])) for r in chosen]


def expire_due(engine: Engine, *, now=None) -> int:
    """Mark ACTIVE rewards past expires_at as EXPIRED and refund each, one transaction per
    reward; returns how many expired. Safe to run from several workers at once.

    A reward whose expiry fails (its transaction rolled back) is passed over for the rest of the
    run, so that the rewards after it, of every organization, are still refunded; the run then
    raises ExpiryFailed, and the next run tries that reward again (it ended every run at that
    reward)."""
    now = now or utcnow()
    expired = 0
    failed: dict[str, Exception] = {}
    while True:
        query = select(rewards.c.id).where(lifecycle.overdue(now))
        if failed:
            query = query.where(rewards.c.id.not_in(list(failed)))
        with db.read(engine) as conn:
            ids = list(conn.execute(query.order_by(rewards.c.expires_at).limit(EXPIRE_BATCH)).scalars())
        for reward_id in ids:
            try:
                with db.write(engine) as conn:
                    row = lifecycle.expire(conn, reward_id, at=now)
                    if row is None:
                        continue  # redeemed or canceled meanwhile, or another worker expired it
                    refund(conn, row, memo=f"reward {reward_id} expired")
                    _drop_queued_deliveries(conn, reward_id, "reward expired")
                    _forget_held_details(conn, reward_id)
                    expired += 1
            except Exception as exc:
                if db.is_unavailable(exc):
                    raise  # the database, not this reward: the job retries the whole run
                log.exception("reward %s could not be expired", reward_id)
                failed[reward_id] = exc
        if len(ids) < EXPIRE_BATCH:
            break
    if failed:
        raise ExpiryFailed(expired, list(failed)) from next(iter(failed.values()))
    return expired


class ExpiryFailed(RuntimeError):
    """expire_due's run ended with rewards it could not expire (each logged with its error);
    `expired` others were expired and refunded."""

    def __init__(self, expired: int, failed: list[str]):
        self.expired, self.failed = expired, failed
        super().__init__(f"{len(failed)} reward(s) could not be expired (first: {failed[0]}); {expired} others were")


def _expiry_of(org: str, campaign_id: str | None):
    """(table, the row's condition) holding the reward expiry of an organization, or of one
    of its campaigns."""
    from largesse.campaigns.models import campaigns
    from largesse.orgs.models import organizations

    if campaign_id is not None:
        return campaigns, (campaigns.c.organization_id == org) & (campaigns.c.id == campaign_id)
    return organizations, organizations.c.id == org


def expiry_days_of(conn: Connection, *, org: str, campaign_id: str | None = None) -> tuple[bool, int | None]:
    """(found, days) of an organization's or one of its campaigns' reward expiry (None: not set,
    the next level's applies: campaign, then organization, then LARGESSE_REWARD_EXPIRY_DAYS)."""
    table, row_of = _expiry_of(org, campaign_id)
    row = conn.execute(select(table.c.reward_expiry_days).where(row_of)).first()
    return (row is not None, row[0] if row is not None else None)


def set_expiry_days(conn: Connection, *, org: str, days: int | None, campaign_id: str | None = None) -> bool:
    """Set the reward expiry of an organization, or of one of its campaigns (None: the default).
    New rewards use it; existing rewards keep their expires_at."""
    table, row_of = _expiry_of(org, campaign_id)
    values = {"reward_expiry_days": days}
    if campaign_id is not None:
        values["updated_at"] = utcnow()
    return conn.execute(update(table).where(row_of).values(**values)).rowcount == 1
