"""Orders and rewards as the API shows them (API.md §3)."""

from __future__ import annotations

from largesse.money import to_wire
from largesse.timeutil import iso, iso_date, spec_timestamp


def reward_to_wire(row, field_values: list[dict], *, created_format: str = "iso8601",
                   link: str | None = None, redeemed_product_id: str | None = None) -> dict:
    get = row.get if isinstance(row, dict) else row._mapping.get
    # email and phone are optional but not nullable in the Node client's types: absent, never null.
    recipient = {"name": get("recipient_name")}
    if get("recipient_email"):
        recipient["email"] = get("recipient_email")
    if get("recipient_phone"):
        recipient["phone"] = get("recipient_phone")
    delivery = {"method": get("delivery_method"), "status": get("delivery_status")}
    if link:
        delivery["link"] = link
    created = get("created_at")
    reward = {
        "id": get("id"),
        "order_id": get("order_id"),
        "created_at": spec_timestamp(created) if created_format == "spec" else iso(created),
        "value": {"denomination": to_wire(get("denomination_cents")), "currency_code": get("currency_code")},
        "recipient": recipient,
        "delivery": delivery,
        "products": list(get("products") or []),
        "campaign_id": get("campaign_id"),
        "custom_fields": field_values,
        "expires_at": iso(get("expires_at")),
    }
    if get("deliver_at"):
        reward["deliver_at"] = iso_date(get("deliver_at"))
    status = get("status")
    if status and status != "ACTIVE":
        # Extra keys are ignored by the official client; this tells integrators what happened.
        reward["redemption"] = {"status": status, "redeemed_at": iso(get("redeemed_at")),
                                "canceled_at": iso(get("canceled_at"))}
        if redeemed_product_id:
            reward["redemption"]["product_id"] = redeemed_product_id
    return reward


def field_value_to_wire(row) -> dict:
    get = row.get if isinstance(row, dict) else row._mapping.get
    return {"id": get("field_id"), "value": get("value"), "label": get("label")}


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
