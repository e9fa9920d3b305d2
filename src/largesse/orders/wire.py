"""Orders and rewards as the API shows them (API.md §3)."""

from __future__ import annotations

import operator
from datetime import datetime

from largesse.money import to_wire
from largesse.orders import lifecycle
from largesse.timeutil import iso, iso_date, spec_timestamp, utcnow

# The reward columns the wire form reads, in the order reward_wire takes them: list queries
# select exactly these (repository.REWARD_WIRE), so a row unpacks positionally, no lookups by name.
REWARD_WIRE_COLUMNS = (
    "id", "order_id", "created_at", "denomination_cents", "currency_code", "recipient_name", "recipient_email",
    "recipient_phone", "delivery_method", "delivery_status", "products", "campaign_id", "expires_at", "deliver_at",
    "status", "redeemed_at", "canceled_at",
)
wire_values = operator.attrgetter(*REWARD_WIRE_COLUMNS)  # row -> its values in that order


def reward_to_wire(row, field_values: list[dict], *, created_format: str = "iso8601",
                   link: str | None = None, redeemed_product_id: str | None = None,
                   now: datetime | None = None) -> dict:
    """A reward from a row (any query's, with the columns of REWARD_WIRE_COLUMNS) or a dict of its columns."""
    values = tuple(map(row.get, REWARD_WIRE_COLUMNS)) if isinstance(row, dict) else wire_values(row)
    return reward_wire(values, field_values, created_format == "spec", link, redeemed_product_id, now=now)


def reward_wire(values, field_values: list[dict], spec_created: bool, link: str | None,
                redeemed_product_id: str | None, *, now: datetime | None = None) -> dict:
    """The one implementation of a reward's wire form, from its REWARD_WIRE_COLUMNS values in order.

    A list page calls it per reward (100 by default), so it reads the values positionally and
    builds the dict in one expression: it was most of the page's CPU when it looked each column
    up by name (docs/benchmarks.md, "GET /rewards search").

    `redemption.status` is the reward's status as lifecycle.status reads it: an ACTIVE reward
    past its expires_at shows EXPIRED (without a time: the sweep records none either) before
    the expiry sweep has stored it. `now`: the time to read it at (a page may pass one for all
    its rewards); None reads the clock, only for such rewards (ACTIVE, with an expiry).
    """
    (reward_id, order_id, created, cents, currency, name, email, phone, method, delivery_status, products,
     campaign_id, expires_at, deliver_at, status, redeemed_at, canceled_at) = values
    # email and phone are optional but not nullable in the Node client's types: absent, never null.
    recipient = {"name": name}
    if email:
        recipient["email"] = email
    if phone:
        recipient["phone"] = phone
    delivery = {"method": method, "status": delivery_status}
    if link:
        delivery["link"] = link
    reward = {
        "id": reward_id,
        "order_id": order_id,
        "created_at": spec_timestamp(created) if spec_created else iso(created),
        "value": {"denomination": to_wire(cents), "currency_code": currency},
        "recipient": recipient,
        "delivery": delivery,
        "products": list(products) if products else [],
        "campaign_id": campaign_id,
        "custom_fields": field_values,
        "expires_at": iso(expires_at),
    }
    if deliver_at:
        reward["deliver_at"] = iso_date(deliver_at)
    if status == "ACTIVE" and expires_at is not None:
        # lifecycle's rule: past its expiry it is EXPIRED before the sweep has run, as its link says (410).
        status = lifecycle.effective(status, expires_at, at=now or utcnow())
    if status and status != "ACTIVE":
        # Extra keys are ignored by the official client; this tells integrators what happened.
        reward["redemption"] = redemption = {"status": status, "redeemed_at": iso(redeemed_at),
                                             "canceled_at": iso(canceled_at)}
        if redeemed_product_id:
            redemption["product_id"] = redeemed_product_id
    return reward


def field_value_wire(field_id: str, value: str, label: str) -> dict:
    return {"id": field_id, "value": value, "label": label}


def order_to_wire(row, rewards: list[dict]) -> dict:
    get = row.get if isinstance(row, dict) else row._mapping.get
    payment = {
        "subtotal": to_wire(get("subtotal_cents")),
        "total": to_wire(get("total_cents")),
        "fees": to_wire(get("fees_cents")),
        "discount": to_wire(get("discount_cents") or 0),
        "currency_code": get("currency_code"),
    }
    if get("fx_currency_code"):
        # A converted order (docs/funding.md): the amounts above were charged in the balance's
        # currency; this is what the rewards are worth in theirs, and the rate that converted them.
        payment["conversion"] = {
            "currency_code": get("fx_currency_code"), "rate": float(get("fx_rate")),
            "rate_text": get("fx_rate"), "rate_date": iso_date(get("fx_rate_date")),
            "subtotal": to_wire(get("fx_subtotal_cents")), "fees": to_wire(get("fx_fees_cents")),
            "total": to_wire(get("fx_total_cents"))}
    if get("refund_cents"):
        payment["refund"] = {"total": to_wire(get("refund_cents")), "currency_code": get("currency_code")}
    return {
        "id": get("id"),
        "external_id": get("external_id"),
        "campaign_id": get("campaign_id"),
        "created_at": iso(get("created_at")),
        "status": get("status"),
        "channel": get("channel") or "API",
        "payment": payment,
        "rewards": rewards,
    }
