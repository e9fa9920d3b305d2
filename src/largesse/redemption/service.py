"""Redemption: what the recipient's page shows, and the one transaction that redeems.

The link's token is the recipient's only credential, so everything here starts from it.
No FastAPI in this module: the endpoints turn RedemptionError kinds into pages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, select

from largesse import db
from largesse.campaigns.models import campaigns
from largesse.catalog.models import products
from largesse.catalog.service import band_for
from largesse.config import Settings
from largesse.delivery import compose
from largesse.fields import service as fields_service
from largesse.money import format_money
from largesse.ops import metrics
from largesse.orders import lifecycle
from largesse.orders.models import reward_field_values, rewards
from largesse.orgs.models import organizations
from largesse.redemption import recipient, tokens
from largesse.redemption.models import payouts, redemption_tokens
from largesse.redemption.providers import DetailsRequired, OutOfStock, provider_for
from largesse.redemption.style import safe_url, theme_css
from largesse.timeutil import utcnow


class RedemptionError(Exception):
    """kind: not_found | canceled | expired | already_redeemed | invalid_choice | invalid_details |
    unavailable | under_review. invalid_details carries `fields` (field name -> message)."""

    def __init__(self, kind: str, message: str = "", fields: dict[str, str] | None = None):
        self.kind = kind
        self.message = message
        self.fields = fields or {}
        super().__init__(kind)
        metrics.redemption(kind)  # raised only by redeem(): one per failed attempt


@dataclass
class Option:
    id: str
    name: str
    description: str
    category: str
    image: str | None
    reason: str | None = None  # why it cannot be chosen; None when it can
    details: str | None = None  # what the recipient must give first (recipient.KINDS), e.g. a bank account

    @property
    def available(self) -> bool:
        return self.reason is None


@dataclass
class Page:
    reward_id: str
    token_hash: str
    status: str  # ACTIVE | REDEEMED | CANCELED | EXPIRED, or UNDER_REVIEW (ACTIVE, held by a fraud rule)
    sender: str
    headline: str
    message: str | None
    logo_url: str | None
    theme: str
    amount: str
    recipient_name: str | None
    options: list[Option] = field(default_factory=list)
    payout: dict | None = None

    @property
    def message_paragraphs(self) -> list[str]:
        return compose.paragraphs(self.message)


def _image(product) -> str | None:
    images = product.images or []
    card = next((i for i in images if i.get("type") == "card"), images[0] if images else None)
    if not card:
        return None
    src = card["src"]
    return src if src.startswith(("https://", "http://", "data:")) else "/" + src.lstrip("/")


def short_description(text: str | None, limit: int = 140) -> str:
    """The first sentence: the choice list stays scannable on a phone."""
    text = (text or "").strip()
    end = text.find(". ")
    first = text[:end + 1] if end != -1 else text
    return first if len(first) <= limit else first[:limit - 1].rsplit(" ", 1)[0] + "…"


def why_unavailable(conn: Connection, reward, product, settings: Settings) -> str | None:
    if product is None or not product.active:
        return "No longer offered"
    band = band_for(product, reward.currency_code)
    if band is None:
        return f"Not offered in {reward.currency_code}"
    if not band["min_cents"] <= reward.denomination_cents <= band["max_cents"]:
        return f"Not available for {format_money(reward.denomination_cents, reward.currency_code)}"
    provider = provider_for(product)
    if provider is None:
        return "Not available at the moment"
    return provider.why_unavailable(conn, product, settings)


def _products(conn: Connection, ids: list[str]) -> dict:
    if not ids:
        return {}
    return {row.id: row for row in conn.execute(select(products).where(products.c.id.in_(ids))).all()}


def _options(conn: Connection, reward, settings: Settings) -> list[Option]:
    ids = list(dict.fromkeys(reward.products or []))
    known = _products(conn, ids)
    options = []
    for pid in ids:
        product = known.get(pid)
        if product is None:
            options.append(Option(pid, pid, "", "", None, "No longer offered"))
            continue
        options.append(Option(product.id, product.name, short_description(product.description), product.category,
                              _image(product), why_unavailable(conn, reward, product, settings),
                              product.recipient_details))
    return options


def _payout(conn: Connection, reward_id: str) -> dict | None:
    row = conn.execute(
        select(payouts, products.c.name, products.c.category, products.c.usage_instructions,
               products.c.disclosure, products.c.images)
        .join(products, products.c.id == payouts.c.product_id)
        .where(payouts.c.reward_id == reward_id)
    ).first()
    if row is None:
        return None
    return {
        "product_id": row.product_id, "product_name": row.name, "category": row.category,
        "provider": row.provider, "code": row.code, "pin": row.pin, "url": row.url,
        "confirmation": row.confirmation, "usage_instructions": row.usage_instructions,
        "disclosure": row.disclosure, "image": _image(row), "created_at": row.created_at,
    }


def is_revoked(conn: Connection, token: str) -> bool:
    """A link replaced by a newer one (a resend): worth a clearer page than "not found"."""
    if not token or len(token) > 200:
        return False
    return conn.execute(
        select(redemption_tokens.c.revoked_at).where(redemption_tokens.c.token_hash == tokens.hash_token(token))
    ).scalar() is not None


def load_page(conn: Connection, token: str, settings: Settings) -> Page | None:
    """Everything the page shows for a live token, or None for an unknown/revoked token."""
    reward_id = tokens.reward_for(conn, token, settings.environment)
    if reward_id is None:
        return None
    reward = conn.execute(select(rewards).where(rewards.c.id == reward_id)).first()
    if reward is None:
        return None
    org_name = conn.execute(
        select(organizations.c.name).where(organizations.c.id == reward.organization_id)
    ).scalar_one()
    campaign = None
    if reward.campaign_id:
        campaign = conn.execute(
            select(campaigns.c.webpage_style, campaigns.c.email_style)
            .where(campaigns.c.id == reward.campaign_id, campaigns.c.organization_id == reward.organization_id)
        ).first()
    status = current_status(conn, reward, at=utcnow())
    # The placeholders of the copy are filled as in the reward's email (delivery.compose).
    values = compose.placeholder_values(
        [f.label for f in fields_service.list_for(conn, reward.organization_id)],
        conn.execute(select(reward_field_values.c.label, reward_field_values.c.value)
                     .where(reward_field_values.c.reward_id == reward.id)).all())
    page = _styled_page(reward, org_name=org_name, status=status, token_hash=tokens.hash_token(token),
                        page_style=(campaign.webpage_style if campaign else None) or {},
                        email_style=(campaign.email_style if campaign else None) or {}, field_values=values)
    if status == "REDEEMED":
        page.payout = _payout(conn, reward.id)
    elif status == "ACTIVE":
        page.options = _options(conn, reward, settings)
    return page


def current_status(conn: Connection, reward, *, at) -> str:
    """The reward's status as its link sees it at `at`: lifecycle.status (an ACTIVE reward past
    its expiry is EXPIRED), and UNDER_REVIEW for an ACTIVE one held by a fraud rule."""
    status = lifecycle.status(reward, at=at)
    if status == "ACTIVE":
        from largesse.fraud.service import is_held

        if is_held(conn, reward.id):
            return "UNDER_REVIEW"
    return status


# What a live (not replaced) link answers, by current_status(): the recipient's page
# (endpoints._show) and the dashboard's reward page read this one rule.
LINK_ANSWERS = {"ACTIVE": "choose", "UNDER_REVIEW": "under_review", "REDEEMED": "payout",
                "CANCELED": "canceled", "EXPIRED": "expired"}
GONE = ("canceled", "expired")  # answered 410: the link no longer works


def link_answer(status: str) -> str:
    """"choose" (the choice of products), "under_review", "payout" (what was issued; 200), or
    "canceled" / "expired" (410, in GONE)."""
    return LINK_ANSWERS.get(status, "expired")


def reward_link_answer(conn: Connection, reward, *, at) -> str:
    """link_answer() of a reward row now: what each of its live links answers."""
    return link_answer(current_status(conn, reward, at=at))


def _styled_page(reward, *, org_name: str, status: str, token_hash: str, page_style: dict, email_style: dict,
                 field_values: dict[str, str]) -> Page:
    """The page's copy is the email's (compose.copy_of): the order's message before the
    campaign's, placeholders filled; only the defaults differ (the organization's name)."""
    copy = compose.copy_of(delivery_meta=reward.delivery_meta, email_style=email_style, webpage_style=page_style,
                           field_values=field_values, default_sender=org_name)
    return Page(
        reward_id=reward.id,
        token_hash=token_hash,
        status=status,
        sender=copy.sender_name,
        headline=copy.headline or f"{copy.sender_name} sent you a reward",
        message=copy.message or None,
        logo_url=safe_url(page_style.get("logo_image_url") or email_style.get("logo_image_url")),
        theme=theme_css(page_style, email_style),
        amount=format_money(reward.denomination_cents, reward.currency_code),
        recipient_name=reward.recipient_name,
    )


@dataclass
class SampleReward:
    """The reward a preview shows: what a campaign's recipient would see (the dashboard)."""

    products: list[str]
    denomination_cents: int
    currency_code: str
    recipient_name: str = "Alex Recipient"
    delivery_meta: dict | None = None
    id: str = "PREVIEW0000"


def preview_page(conn: Connection, *, org_name: str, page_style: dict, email_style: dict, reward: SampleReward,
                 settings: Settings) -> Page:
    """The page a recipient of `reward` would see, with these styles, before anything is sent."""
    page = _styled_page(reward, org_name=org_name, status="ACTIVE", token_hash="preview", page_style=page_style,
                        email_style=email_style, field_values={})  # placeholders shown as written
    page.options = _options(conn, reward, settings)
    return page


def redeem(engine: Engine, *, token: str, product_id: str, settings: Settings, client=None,
           details: Mapping[str, str] | None = None) -> str:
    """Redeem the link's reward for product_id in ONE transaction; returns the reward id.

    The reward's row is locked first (PostgreSQL: FOR UPDATE, so a concurrent attempt, cancel
    or expiry waits and then sees the outcome; SQLite: BEGIN IMMEDIATE serialises writers), so
    the conditional UPDATE of lifecycle.close then always wins. The organization's fraud rules
    may hold the redemption instead (fraud.service.evaluate): the reward stays ACTIVE under
    review, nothing is paid, and the page shows that it is under review. Otherwise the provider
    issues inside the same transaction; any failure rolls all of it back.

    `details` are the form's values: a product with recipient_details (a bank deposit) is paid
    only with valid ones (recipient.parse), else RedemptionError("invalid_details") with the
    field errors and nothing redeemed. They go to the provider and are never logged; a held
    redemption keeps them encrypted on its review until it is decided (docs/fraud.md).
    """
    from largesse.fraud import service as fraud

    with db.write(engine) as conn:
        reward_id = tokens.reward_for(conn, token, settings.environment)
        if reward_id is None:
            raise RedemptionError("not_found")
        now = utcnow()
        reward = conn.execute(select(rewards).where(rewards.c.id == reward_id).with_for_update()).first()
        status = lifecycle.status(reward, at=now)
        if status != "ACTIVE":
            raise RedemptionError({"REDEEMED": "already_redeemed", "CANCELED": "canceled"}.get(status, "expired"))
        if fraud.is_held(conn, reward_id):
            raise RedemptionError("under_review")
        if product_id not in (reward.products or []):
            raise RedemptionError("invalid_choice", "Choose one of the options shown.")
        product = _products(conn, [product_id]).get(product_id)
        reason = why_unavailable(conn, reward, product, settings)
        if reason:
            raise RedemptionError("unavailable", f"{product.name if product else product_id}: {reason}.")
        given = None
        if product.recipient_details:
            try:
                given = recipient.parse(product.recipient_details, details or {})
            except recipient.InvalidDetails as exc:
                raise RedemptionError("invalid_details", "Please check the bank account details below.",
                                      fields=exc.errors) from None
        if fraud.evaluate(conn, reward=reward, product=product, client=client, at=now):
            if given is not None:  # paid on release: kept encrypted until the review is decided
                fraud.keep_details(conn, reward_id, recipient.seal(product.recipient_details, given, settings))
            metrics.redemption("held")
            return reward_id  # held for review: committed without any payout
        if not lifecycle.close(conn, reward_id, status="REDEEMED", at=now):
            raise RedemptionError("already_redeemed")  # cannot happen under the row lock; never pay twice
        try:
            pay(conn, reward=reward, product=product, settings=settings, at=now, details=given)
        except OutOfStock:
            raise RedemptionError("unavailable", f"{product.name} just ran out. Please choose another option.") \
                from None
    metrics.redemption("redeemed")
    return reward_id


def pay(conn: Connection, *, reward, product, settings: Settings, at, details=None) -> None:
    """Issue the product for a reward this transaction has just closed as REDEEMED, and record
    the payout (primary key reward_id: never twice). OutOfStock when the provider has none;
    DetailsRequired for a product that pays to the recipient's details (a bank account) when
    there are none (a review held before migration 0027 kept none). Shared by redeem() and a
    fraud review's release, which passes the details it kept encrypted."""
    if product.recipient_details and details is None:
        raise DetailsRequired(product.id)
    provider = provider_for(product)
    issued = provider.issue(conn, reward=reward, product=product, settings=settings, details=details)
    conn.execute(payouts.insert().values(
        reward_id=reward.id, organization_id=reward.organization_id, product_id=product.id,
        provider=provider.name, code=issued.code, pin=issued.pin, url=issued.url,
        confirmation=issued.confirmation, created_at=at,
    ))
