"""Wire schemas of orders and rewards (API.md §2.1 and §3)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from largesse import codes
from largesse.money import Amount, ExactJsonModel, exact_amount
from largesse.paths import undecodable_or_control
from largesse.schemas import Id, Name, Out, Text, Wire

MAX_CUSTOM_FIELDS = 100  # per reward; so also the most labels GET /rewards can usefully match

DELIVERY_METHODS = ("EMAIL", "LINK", "PHONE")
MAX_REWARDS_PER_ORDER = 500
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # a calendar date as API.md §0 writes it


class ValueIn(Wire):
    # A JSON number (never a string or a bool) kept exact: CreateOrderIn copies the text of
    # a fractional number in; service.py turns it into cents for the reward's currency.
    denomination: Amount
    currency_code: Text(3, 3) | None = None


class RecipientIn(Wire):
    name: Name | None = None
    email: Text(320) | None = None
    phone: Text(40) | None = None


class DeliveryMetaIn(Wire):
    sender_name: Text(200) | None = None
    subject_line: Text(300) | None = None
    message: Text(5000) | None = None


class DeliveryIn(Wire):
    method: Text(10) = "EMAIL"
    meta: DeliveryMetaIn | None = None

    @field_validator("method")
    @classmethod
    def known_method(cls, value: str) -> str:
        value = value.upper()
        if value not in DELIVERY_METHODS:
            raise ValueError(f"must be one of {', '.join(DELIVERY_METHODS)}")
        return value


class CustomFieldIn(Wire):
    id: Id
    # The key is required; null (the Node client's `value?: string | null`) gives the field no
    # value on this reward, which a required field refuses (orders.service._field_values).
    value: Text(1000) | None


class RewardIn(Wire):
    campaign_id: Id | None = None
    products: list[Id] | None = Field(default=None, max_length=100)
    value: ValueIn
    recipient: RecipientIn
    delivery: DeliveryIn
    custom_fields: list[CustomFieldIn] | None = Field(default=None, max_length=MAX_CUSTOM_FIELDS)
    deliver_at: dt.date | None = Field(default=None, strict=False)
    language: Text(10) | None = None

    @field_validator("language")
    @classmethod
    def iso_639_1(cls, value: str | None) -> str | None:
        """API.md §2.1: an ISO-639-1 code (`en`, `de`); a region or script subtag may follow
        (`pt-BR`). Stored with the code lower case."""
        if value is None:
            return None
        tag = codes.language(value)
        if tag is None:
            raise ValueError("must be an ISO 639-1 language code such as en or de")
        return tag

    @field_validator("deliver_at", mode="before")
    @classmethod
    def date_of_date_time(cls, value: Any) -> Any:
        """A date-time (JavaScript's toISOString(): 2026-12-01T00:00:00.000Z) counts as its
        date as written; the time part and offset are ignored (API.md §2.1). Nothing else is a
        date: not a number, which pydantic's lax mode would read as Unix seconds."""
        if value is None:
            return None
        if isinstance(value, str) and len(value) > 10 and value[10:11] in ("T", "t", " "):
            try:
                return dt.datetime.fromisoformat(value.replace("z", "Z")).date()
            except ValueError:
                raise ValueError("must be a date (YYYY-MM-DD) or an ISO 8601 date-time") from None
        if not isinstance(value, str) or not _DATE.fullmatch(value):
            raise ValueError("must be a date (YYYY-MM-DD) or an ISO 8601 date-time")
        return value

    @model_validator(mode="after")
    def needs_products_or_campaign(self) -> RewardIn:
        if not self.products and not self.campaign_id:
            raise ValueError("products or campaign_id is required")
        return self


class PaymentIn(Wire):
    funding_source_id: Id


class CreateOrderIn(Wire, ExactJsonModel):
    external_id: Text(200, 1) | None = None
    payment: PaymentIn
    reward: RewardIn | None = None
    rewards: list[RewardIn] | None = Field(default=None, min_length=1, max_length=MAX_REWARDS_PER_ORDER)

    @field_validator("external_id")
    @classmethod
    def fetchable_external_id(cls, value: str | None) -> str | None:
        # GET /orders/{external_id}: clients quote "/" as %2F, which is decoded before
        # routing (API.md §7.10), so such an order could never be fetched by it.
        if value is not None and "/" in value:
            raise ValueError("must not contain '/'")
        # Nor "." and "..": HTTP clients remove such path segments (RFC 3986 §5.2.4) before sending.
        if value in (".", ".."):
            raise ValueError("must not be '.' or '..'")
        # Nor control characters (tab, newline, DEL, U+0085) or U+FFFD: a path holding one is
        # refused with 400 before routing (paths.py), so GET /orders/{external_id} and the
        # approvals could never reach the order.
        if value is not None and undecodable_or_control(value):
            raise ValueError("must not contain control characters")
        return value

    @model_validator(mode="after")
    def one_of_reward_or_rewards(self) -> CreateOrderIn:
        if (self.reward is None) == (self.rewards is None):
            raise ValueError("send exactly one of reward or rewards")
        return self

    def adopt_exact_numbers(self, data: Any) -> None:
        """Denominations from the exact reading of the body (money.ExactJsonModel)."""
        if self.reward is not None:
            _adopt(self.reward, exact_amount(data, "reward", "value", "denomination"))
        if self.rewards:
            exact = data.get("rewards") if isinstance(data, dict) else None
            for i, reward in enumerate(self.rewards):
                _adopt(reward, exact_amount(exact, i, "value", "denomination"))


def _adopt(reward: RewardIn, exact) -> None:
    if exact is not None:
        # Straight into the field's storage: the value was validated as a number already, and
        # pydantic's __setattr__ costs more than the rest of this per reward.
        reward.value.__dict__["denomination"] = exact


# Response models: they document the wire format in /openapi.json.

class PaymentOut(Out):
    subtotal: float
    total: float
    fees: float
    discount: float
    currency_code: str


class CustomFieldOut(Out):
    id: str
    value: str
    label: str


class RewardOut(Out):
    id: str
    order_id: str
    created_at: str
    expires_at: str | None = None
    value: dict
    recipient: dict
    delivery: dict
    products: list[str]
    campaign_id: str | None = None
    custom_fields: list[CustomFieldOut]
    deliver_at: str | None = None


class OrderOut(Out):
    id: str
    external_id: str | None
    campaign_id: str | None = None
    created_at: str
    status: str
    channel: str
    payment: PaymentOut
    rewards: list[RewardOut]


class OrderEnvelope(Out):
    order: OrderOut


class OrderList(Out):
    orders: list[OrderOut]
    total_count: int


class RewardEnvelope(Out):
    reward: RewardOut


class RewardList(Out):
    rewards: list[RewardOut]
    total_count: int

