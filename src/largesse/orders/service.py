"""Placing orders: validation against the catalog, campaigns and fields, then the order,
its rewards, their field values and delivery jobs, and the debit of the balance.

All of it is one write transaction. On PostgreSQL the balance's row lock is taken only by
the debit, the last statement, so concurrent orders overlap until then; on SQLite the
request runs inline on the event loop (web.run_db) and writers are serialized anyway, so
a separate read transaction would only add a connection checkout and a BEGIN/COMMIT.
Statements are built once at import: constructing them per request cost more CPU than
the database work itself.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import timedelta

import orjson
from sqlalchemy import Connection, Engine, and_, bindparam, exists, select
from sqlalchemy.exc import IntegrityError

from largesse import auth, db, email_address
from largesse.auth import Caller, Credentials
from largesse.campaigns import service as campaigns_service
from largesse.catalog import service as catalog
from largesse.config import Settings
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.errors import ApiError, BadRequest, Conflict, NotFound, PaymentRequired, payload_from
from largesse.fields import service as fields_service
from largesse.fields.models import fields as _fields
from largesse.forex import conversion
from largesse.funding import service as funding
from largesse.funding.models import funding_sources as _funding_sources
from largesse.ids import new_id
from largesse.money import (
    LEGACY_FLOAT,
    MAX_CENTS,
    MoneyError,
    amount_in,
    decimals_for,
    float_exact,
    percent_of,
    to_cents,
)
from largesse.ops import metrics
from largesse.orders import approvals, lifecycle, pg_write, repository
from largesse.orders.models import orders, reward_field_values, rewards
from largesse.orders.schemas import CreateOrderIn, RewardIn
from largesse.orders.wire import field_value_wire, order_to_wire, reward_to_wire
from largesse.orgs import service as orgs
from largesse.orgs.models import api_keys as _api_keys
from largesse.orgs.models import organizations as _organizations
from largesse.orgs.service import email_key
from largesse.redemption import tokens
from largesse.timeutil import utcnow
from largesse.webhooks import service as webhooks
from largesse.webhooks.models import webhooks as _webhooks

PHONE = re.compile(r"^\+?[0-9][0-9 ().-]{5,30}\Z")
MAX_DELIVER_AHEAD = timedelta(days=365)


@dataclass
class PlacedOrder:
    order: dict
    replay: bool = False


@dataclass
class _Errors:
    """Collects every problem of a request, raised together as one 400.

    An unknown ID inside the body (product, campaign, custom field) is a 400 pointing at the
    property, not a 404: 404 is for the resource named in the path, and create_order's client
    decodes no 404 body. The unknown IDs lead the message, being the likelier root cause."""

    items: list[tuple[tuple, str]] = field(default_factory=list)
    not_found: list[tuple[tuple, str]] = field(default_factory=list)

    def add(self, loc: tuple, message: str) -> None:
        self.items.append((loc, message))

    def missing(self, loc: tuple, message: str) -> None:
        self.not_found.append((loc, message))

    def raise_any(self) -> None:
        problems = self.not_found + self.items
        if problems:
            loc, message = problems[0]
            raise BadRequest(f"{'.'.join(map(str, loc))}: {message}", payload_from(problems))


def request_hash(body: CreateOrderIn, *, legacy_float: bool = False) -> str:
    """The fingerprint an external_id's order keeps of its request: a retry replays the order
    only with the same one (else 409). Amounts enter it exactly (money.canonical_text)."""
    dumped = body.model_dump(mode="json", exclude_none=True, context={LEGACY_FLOAT: legacy_float})
    return hashlib.sha256(orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class _Fingerprint:
    body: CreateOrderIn
    exact: str

    def matches(self, stored: str | None) -> bool:
        """Whether an order stored with this fingerprint had these parameters. An order placed
        before amounts were hashed exactly has their floats' fingerprint: it still matches a
        request whose amounts a float holds exactly (25.000000000000001 does not)."""
        if stored == self.exact:
            return True
        return (stored is not None and all(float_exact(r.value.denomination) for _, r in _reward_inputs(self.body))
                and stored == request_hash(self.body, legacy_float=True))


def place_order(engine: Engine, *, settings: Settings, credentials: Credentials, body: CreateOrderIn) -> PlacedOrder:
    """POST /orders: the order of the API key's organization."""

    def caller_of(conn: Connection, probes: _Probes):
        context = _CONTEXT.first(conn, {"key_hash": credentials.key_hash, **probes.params()})
        return context, auth.caller_from(context, credentials)

    return _place(engine, settings, body, caller_of, channel="API")


def place_order_as_member(engine: Engine, *, settings: Settings, organization_id: str, body: CreateOrderIn,
                          channel: str = "UI") -> PlacedOrder:
    """The same order, placed by a signed-in member of the organization (the dashboard):
    same validation, transaction, replay rule and webhooks as POST /orders."""
    return _place(engine, settings, body, lambda conn, probes: _member_caller(conn, organization_id, probes),
                  channel=channel)


def preview_order_as_member(engine: Engine, *, settings: Settings, organization_id: str,
                            body: CreateOrderIn) -> OrderPreview:
    """What place_order_as_member would do with body, without doing it: every problem of
    every reward (the API's own checks and messages), and the cost of the valid rewards."""
    reward_inputs = _reward_inputs(body)
    probes = _Probes.of(body, reward_inputs, sandbox=settings.sandbox)
    with db.read(engine) as conn:
        context, caller = _member_caller(conn, organization_id, probes)
        try:
            plan = _plan(conn, settings=settings, caller=caller, context=context, probes=probes, body=body,
                         reward_inputs=reward_inputs, channel="UI")
        except ApiError as exc:  # before any reward: e.g. the payment's funding source
            return OrderPreview(problems=[((), exc.message)], subtotal_cents=0, fees_cents=0,
                                available_cents=0, currency_code=caller.currency_code)
        available = funding.available(conn, plan.funding_source_id)
    problems = plan.errors.not_found + plan.errors.items
    bad = {loc[1] for loc, _ in problems if len(loc) > 1 and loc[0] == "rewards"}
    # In the balance's currency, as the order would be charged (a converted reward's value and
    # fee are in its own currency on its row).
    valid = [cost for i, cost in enumerate(plan.costs) if i not in bad]
    return OrderPreview(problems=problems, subtotal_cents=sum(value for value, _ in valid),
                        fees_cents=sum(fee for _, fee in valid), available_cents=available,
                        currency_code=plan.order_row["currency_code"],
                        needs_approval=plan.order_row["status"] == approvals.PENDING)


@dataclass
class OrderPreview:
    problems: list[tuple[tuple, str]]  # (loc as in the API's error payload, message)
    subtotal_cents: int
    fees_cents: int
    available_cents: int
    currency_code: str
    needs_approval: bool = False  # the organization's approval policy holds this order (_plan's status)

    @property
    def balance_after_cents(self) -> int:
        return self.available_cents - self.total_cents

    @property
    def affordable(self) -> bool:
        """The balance covers the total (place_order's debit would succeed now)."""
        return self.balance_after_cents >= 0

    @property
    def total_cents(self) -> int:
        return self.subtotal_cents + self.fees_cents


def _reward_inputs(body: CreateOrderIn) -> list[tuple[tuple, RewardIn]]:
    return [(("reward",), body.reward)] if body.reward is not None else [
        (("rewards", i), r) for i, r in enumerate(body.rewards or [])
    ]


def _recipient_emails(reward_inputs: list[tuple[tuple, RewardIn]]) -> list[str]:
    return [r.recipient.email for _, r in reward_inputs if r.recipient.email]


@dataclass(frozen=True)
class _Probes:
    """Two lookups of an order, asked by its context statement (_CONTEXT, _ORG_CONTEXT) rather
    than by statements of their own: one round trip instead of three on the hottest path.

    external_id: is it used already (context.external_id_used)? member_key: in the sandbox,
    the email_key of the order's one recipient address, is it a member (context.member_key_found)?
    None when the order has no or several addresses: _plan asks orgs.member_keys then."""

    external_id: str | None
    member_key: str | None

    @classmethod
    def of(cls, body: CreateOrderIn, reward_inputs, *, sandbox: bool) -> _Probes:
        keys = {email_key(e) for e in _recipient_emails(reward_inputs)} if sandbox else set()
        return cls(body.external_id, keys.pop() if len(keys) == 1 else None)

    def params(self) -> dict:
        return {"external_id": self.external_id, "member_key": self.member_key}


def _place(engine: Engine, settings: Settings, body: CreateOrderIn, caller_of, *, channel: str) -> PlacedOrder:
    # Hashed only when kept: an order without an external_id is never replayed.
    fingerprint = _Fingerprint(body, request_hash(body)) if body.external_id is not None else None
    reward_inputs = _reward_inputs(body)
    probes = _Probes.of(body, reward_inputs, sandbox=settings.sandbox)
    org = None
    try:
        # On PostgreSQL the order's writes are one statement (pg_write): db.write runs the block
        # without BEGIN/COMMIT round trips then, the statement being its own transaction.
        with db.write(engine, one_write_statement=True) as conn:
            context, caller = caller_of(conn, probes)
            org = caller.organization_id
            if context.external_id_used:
                replay = _replay(conn, org, body.external_id, fingerprint, settings.public_url)
                if replay is not None:
                    return replay
            plan = _plan(conn, settings=settings, caller=caller, context=context, probes=probes, body=body,
                         reward_inputs=reward_inputs, channel=channel)
            plan.errors.raise_any()
            links = _write(conn, plan, fingerprint.exact if fingerprint else None, has_webhook=context.has_webhook)
    except (IntegrityError, PaymentRequired):
        if body.external_id is None or org is None:
            raise
        # A concurrent request with the same external_id committed first: the unique index
        # refused this one, or (PostgreSQL, one statement that debits before it inserts) the
        # original took the last of the balance this one waited for. The client retried an order
        # that exists: 201 with it (409 for other parameters), not 402.
        with db.write(engine) as conn:
            replay = _replay(conn, org, body.external_id, fingerprint, settings.public_url)
        if replay is None:
            raise
        return replay
    metrics.order_created(plan.order_row["currency_code"], plan.order_row["total_cents"])
    public = settings.public_url
    wire_rewards = [
        reward_to_wire(r, plan.field_values.get(r["id"], []), now=plan.order_row["created_at"],  # none expired
                       link=tokens.link(public, links[r["id"]]) if r["id"] in links else None)
        for r in plan.reward_rows
    ]
    return PlacedOrder(order_to_wire(plan.order_row, wire_rewards))


def _external_id_is(org):
    """SQL: the order of organization `org` (a column or parameter) with :external_id."""
    return and_(orders.c.organization_id == org, orders.c.external_id == bindparam("external_id"))


# Everything an order needs to know about its caller, in one statement: the key's
# organization, its balance, and whether it has a webhook or required custom fields.
# What an order needs of its organization besides the caller's key, shared by both contexts:
# the balance in the organization's currency, webhook and required fields, approval policy,
# and the answers to its _Probes (bound as :external_id and :member_key).
_ORDER_COLUMNS = (
    _funding_sources.c.id.label("balance_id"),
    _funding_sources.c.currency_code.label("balance_currency"),
    exists().where(_webhooks.c.organization_id == _organizations.c.id).label("has_webhook"),
    exists().where(_fields.c.organization_id == _organizations.c.id, _fields.c.required.is_(True))
    .label("has_required_fields"),
    _organizations.c.approval_mode, _organizations.c.approval_above_cents,
    exists().where(_external_id_is(_organizations.c.id)).label("external_id_used"),
    orgs.member_key_found(_organizations.c.id, bindparam("member_key")).label("member_key_found"),
)
_BALANCE_JOIN = and_(_funding_sources.c.organization_id == _organizations.c.id,
                     _funding_sources.c.method == "balance",
                     _funding_sources.c.currency_code == _organizations.c.currency_code)
_CONTEXT = db.Prepared(
    select(*auth.CALLER_COLUMNS, *_ORDER_COLUMNS)
    .select_from(_api_keys)
    .join(_organizations, _organizations.c.id == _api_keys.c.organization_id)
    .outerjoin(_funding_sources, _BALANCE_JOIN)
    .where(_api_keys.c.key_hash == bindparam("key_hash"), _api_keys.c.revoked_at.is_(None))
)
# The same context for a member of an organization (the dashboard), who holds no API key.
_ORG_CONTEXT = (
    select(
        _organizations.c.id.label("org_id"), _organizations.c.currency_code,
        _organizations.c.fee_basis_points, _organizations.c.fee_flat_cents, _organizations.c.reward_expiry_days,
        _organizations.c.environment, *_ORDER_COLUMNS,
    )
    .select_from(_organizations)
    .outerjoin(_funding_sources, _BALANCE_JOIN)
    .where(_organizations.c.id == bindparam("org"))
)


def _member_caller(conn: Connection, organization_id: str, probes: _Probes):
    context = conn.execute(_ORG_CONTEXT, {"org": organization_id, **probes.params()}).first()
    if context is None:
        raise NotFound(f"Organization {organization_id} not found", {"organization_id": ["not found"]})
    return context, Caller(
        organization_id=context.org_id, currency_code=context.currency_code,
        fee_basis_points=context.fee_basis_points, fee_flat_cents=context.fee_flat_cents,
        reward_expiry_days=context.reward_expiry_days, permission="read_write", key_id="")


# The hot statements run through db.Prepared (compiled once, executed on the driver).
_BY_EXTERNAL_ID = select(orders).where(_external_id_is(bindparam("org")))
_INSERT_ORDER = db.Prepared(orders.insert())
_INSERT_REWARDS = db.Prepared(rewards.insert())
_INSERT_FIELD_VALUES = db.Prepared(reward_field_values.insert())
_INSERT_JOBS = db.Prepared(jobs.insert())


def _replay(conn: Connection, org: str, external_id: str, fingerprint: _Fingerprint, public_url: str):
    """The replay of the order with this external_id, 409 if its parameters differ, None if
    there is none. Most external_ids are new: the context statement probes (_Probes) and this
    loads the order only when that found one, or when a concurrent order took it."""
    existing = conn.execute(_BY_EXTERNAL_ID, {"org": org, "external_id": external_id}).first()
    if existing is None:
        return None
    if not fingerprint.matches(existing.request_hash):
        raise Conflict(
            f"An order with external_id {external_id!r} already exists with different parameters",
            {"external_id": ["has already been used with different parameters"]},
        )
    order = repository.orders_to_wire(conn, [existing])[0]
    if existing.status == "EXECUTED":
        # The original response handed each LINK reward's link over, and only its hash is kept:
        # the replay hands over a fresh one (the earlier stays valid, as with generate_link), so
        # a client that lost the first response to a timeout still gets working links.
        live = conn.execute(_LIVE_LINK_REWARDS, {"order_id": existing.id}).scalars().all()
        if live:
            issued = tokens.issue_many(conn, live)
            for reward in order["rewards"]:
                if reward["id"] in issued:
                    reward["delivery"]["link"] = tokens.link(public_url, issued[reward["id"]])
    return PlacedOrder(order, replay=True)


_LIVE_LINK_REWARDS = select(rewards.c.id).where(
    rewards.c.order_id == bindparam("order_id"), rewards.c.delivery_method == "LINK", rewards.c.status == "ACTIVE")


@dataclass
class _Plan:
    order_row: dict
    reward_rows: list[dict]
    field_rows: list[dict]
    field_values: dict[str, list[dict]]
    job_rows: list[dict]
    link_reward_ids: list[str]
    funding_source_id: str
    errors: _Errors  # raised by the caller (_place); a preview reads them instead
    costs: list[tuple[int, int]]  # each reward's (value, fee) in the balance's currency, converted


def _plan(conn: Connection, *, settings: Settings, caller: Caller, context, probes: _Probes, body: CreateOrderIn,
          reward_inputs: list[tuple[tuple, RewardIn]], channel: str = "API") -> _Plan:
    org = caller.organization_id
    errors = _Errors()
    named_currencies = {r.value.currency_code.upper() for _, r in reward_inputs if r.value.currency_code}
    balance_id, currency = conversion.choose_balance(
        conn, org=org, context=context, funding_source_id=body.payment.funding_source_id,
        reward_currencies=named_currencies, loc=("payment", "funding_source_id"))
    # Rewards in another currency than the balance's convert (forex/conversion.py); None: none do.
    rates = conversion.Rates(conn)  # read once, by whichever of the two needs them first
    fx = conversion.Converter(rates, currency) if named_currencies - {currency} else None
    fx_subtotal = fx_fees = 0
    flat_fee = conversion.FlatFee(rates, caller.fee_flat_cents, caller.currency_code)

    campaign_ids = {r.campaign_id for _, r in reward_inputs if r.campaign_id}
    campaigns = campaigns_service.get_many(conn, org, campaign_ids)
    product_ids: set[str] = set()
    for loc, r in reward_inputs:
        if r.campaign_id and r.campaign_id not in campaigns:
            errors.missing(loc + ("campaign_id",), f"campaign {r.campaign_id} not found")
        product_ids.update(r.products or [])
    for c in campaigns.values():
        product_ids.update(c.products or [])
    catalog_rows = catalog.get_many_cached(conn, product_ids)
    wants_fields = context.has_required_fields or any(r.custom_fields for _, r in reward_inputs)
    org_fields = {f.id: f for f in fields_service.list_for(conn, org)} if wants_fields else {}
    if not settings.sandbox:
        members = set()
    elif probes.member_key is not None:  # the context statement looked it up
        members = {probes.member_key} if context.member_key_found else set()
    else:
        members = orgs.member_keys(conn, org, _recipient_emails(reward_inputs))

    now = utcnow()
    today = now.date()
    order_id = new_id()
    # Random IDs, drawn for the whole order and handed out sorted: an order's rewards share their
    # created_at and are read back by (created_at, id), so they come back in the request's order.
    reward_ids = iter(sorted(new_id() for _ in reward_inputs))
    reward_rows, field_rows, job_rows, link_ids = [], [], [], []
    costs: list[tuple[int, int]] = []
    field_values: dict[str, list[dict]] = {}
    for loc, r in reward_inputs:
        campaign = campaigns.get(r.campaign_id) if r.campaign_id else None
        offered = list(dict.fromkeys(r.products)) if r.products else list(campaign.products if campaign else [])
        reward_currency = (r.value.currency_code or currency).upper()
        try:
            cents = to_cents(r.value.denomination, decimals=decimals_for(reward_currency))
            if cents <= 0:
                raise MoneyError("must be greater than 0")
        except MoneyError as exc:
            errors.add(loc + ("value", "denomination"), str(exc))
            cents = 0
        problem = fx.problem(reward_currency) if fx is not None else None
        if problem:
            errors.add(loc + ("value", "currency_code"), problem)
        if not offered:
            errors.add(loc + ("products",), "no products: send products or a campaign that has some")
        elif r.products:
            _check_named_products(errors, loc, offered, catalog_rows, reward_currency, cents)
        else:
            offered = _campaign_offer(errors, loc, campaign, catalog_rows, reward_currency, cents)
        method = r.delivery.method
        name = (r.recipient.name or "").strip()
        email = (r.recipient.email or "").strip() or None
        phone = (r.recipient.phone or "").strip() or None
        if not name:
            errors.add(loc + ("recipient", "name"), "can't be blank")
        if email is not None and not email_address.valid(email):
            errors.add(loc + ("recipient", "email"), "is not a valid email address")
        if method == "EMAIL" and email is None:
            errors.add(loc + ("recipient", "email"), "is required for EMAIL delivery")
        if method == "PHONE":
            if not settings.sms_url:
                errors.add(loc + ("delivery", "method"),
                           "PHONE delivery needs an SMS transport: set LARGESSE_SMS_URL on the server")
            if phone is None or not PHONE.match(phone):
                errors.add(loc + ("recipient", "phone"), "is required for PHONE delivery (with a + country code)")
        if settings.sandbox and email is not None and email_address.valid(email) and email_key(email) not in members:
            errors.add(loc + ("recipient", "email"),
                       "in the sandbox, rewards can only be sent to members of your organization")
        if r.deliver_at is not None and not today <= r.deliver_at <= today + MAX_DELIVER_AHEAD:
            errors.add(loc + ("deliver_at",), "must be between today and one year from now")

        reward_id = next(reward_ids)
        values = _field_values(errors, loc, r, org_fields)
        flat = flat_fee.in_currency(reward_currency)
        if flat is None:
            flat = 0
            if not problem:
                errors.add(loc + ("value", "currency_code"),
                           f"no exchange rate from {caller.currency_code} (the currency of your flat fee per "
                           f"reward) to {reward_currency} is configured; nothing was charged")
        fee = percent_of(cents, caller.fee_basis_points, reward_currency) + flat
        charged = None
        if fx is not None and not problem:  # amounts in the balance's currency; the reward keeps its own
            charged, converted = fx.charge(cents + fee), fx.charge(cents)
            if charged > MAX_CENTS:  # an extreme configured rate: no such amount can be paid (nor stored)
                errors.add(loc + ("value", "denomination"), f"is more than any balance holds once converted to "
                                                            f"{fx.target}; nothing was charged")
            elif charged == 0 and cents > 0:  # 6 KRW with its fee: a reward for nothing, and nothing to refund
                errors.add(loc + ("value", "denomination"), f"is worth less than the smallest amount of "
                                                            f"{fx.target} once converted; nothing was charged")
            fx_subtotal, fx_fees = fx_subtotal + cents, fx_fees + fee
            costs.append((converted, charged - converted))
        else:
            costs.append((cents, fee))
        delivers = lifecycle.delivery_start(method, r.deliver_at, now)  # its job and its expiry start then
        scheduled = delivers != now
        expiry_days = (campaign.reward_expiry_days if campaign and campaign.reward_expiry_days
                       else caller.reward_expiry_days or settings.reward_expiry_days)
        reward_rows.append({
            "id": reward_id, "organization_id": org, "order_id": order_id, "campaign_id": r.campaign_id,
            "products": offered, "denomination_cents": cents, "fee_cents": fee, "currency_code": reward_currency,
            "recipient_name": name, "recipient_email": email, "recipient_phone": phone,
            "delivery_method": method,
            "delivery_status": "SUCCEEDED" if method == "LINK" else ("SCHEDULED" if scheduled else "PENDING"),
            "delivery_meta": r.delivery.meta.model_dump(exclude_none=True) if r.delivery.meta else None,
            "delivered_at": now if method == "LINK" else None,
            "deliver_at": r.deliver_at, "language": r.language, "status": "ACTIVE",
            "expires_at": delivers + timedelta(days=expiry_days) if expiry_days else None,
            "created_at": now,
        })
        if fx is not None:
            reward_rows[-1]["charged_cents"] = charged
        field_values[reward_id] = []
        for field_row, value in values:
            field_rows.append({
                "reward_id": reward_id, "field_id": field_row.id, "organization_id": org,
                "label": field_row.label, "value": value, "reward_created_at": now,
            })
            field_values[reward_id].append(field_value_wire(field_row.id, value, field_row.label))
        if method == "LINK":
            link_ids.append(reward_id)
        else:
            job_rows.append(job_queue.queued_row(kind="deliver_reward", organization_id=org, reward_id=reward_id,
                                                 run_after=delivers, now=now))
    subtotal, fees = sum(value for value, _ in costs), sum(fee for _, fee in costs)
    # An order that needs approval is paid now (held in pending_cents) and delivered at approval.
    status = "EXECUTED"
    # The threshold is in the organization's currency, the total in the balance's: converted (no
    # rate between them: the order waits for a person, rather than escaping the rule).
    above = context.approval_above_cents
    if context.approval_mode == "above" and above is not None and currency != caller.currency_code:
        above = rates.convert(above, caller.currency_code, currency)
        above = -1 if above is None else above
    if approvals.needs_approval(context.approval_mode, above, channel=channel, total_cents=subtotal + fees):
        status = approvals.PENDING
        job_rows, link_ids = [], []
        for row in reward_rows:
            row.update(delivery_status="PENDING", delivered_at=None)
    order_campaigns = {r.campaign_id for _, r in reward_inputs}
    order_row = {
        "id": order_id, "organization_id": org, "external_id": body.external_id, "request_hash": None,
        "campaign_id": order_campaigns.pop() if len(order_campaigns) == 1 else None,
        "status": status, "channel": channel, "funding_source_id": balance_id, "currency_code": currency,
        "subtotal_cents": subtotal, "fees_cents": fees, "discount_cents": 0, "total_cents": subtotal + fees,
        "refund_cents": 0, "created_at": now,
    }
    if fx is not None:
        order_row.update(fx_currency_code=fx.source, fx_rate=str(fx.rate), fx_rate_date=fx.rate_date,
                         fx_subtotal_cents=fx_subtotal, fx_fees_cents=fx_fees,
                         fx_total_cents=fx_subtotal + fx_fees)
    return _Plan(order_row, reward_rows, field_rows, field_values, job_rows, link_ids, balance_id, errors, costs)


def _check_named_products(errors: _Errors, loc: tuple, offered: list[str], catalog_rows: dict, currency: str,
                          cents: int) -> None:
    """Products the request names: each must exist, be offered in the reward's currency and
    take its value."""
    for pid in offered:
        product = catalog_rows.get(pid)
        if product is None:
            errors.missing(loc + ("products",), f"product {pid} not found")
            continue
        band = catalog.band_for(product, currency)
        if band is None:
            errors.add(loc + ("products",), f"product {pid} is not available in {currency}")
        elif cents and not band["min_cents"] <= cents <= band["max_cents"]:
            errors.add(loc + ("value", "denomination"),
                       f"must be between {amount_in(band['min_cents'], currency)} and "
                       f"{amount_in(band['max_cents'], currency)} {currency} for product {pid}")


def _campaign_offer(errors: _Errors, loc: tuple, campaign, catalog_rows: dict, currency: str, cents: int) -> list[str]:
    """The campaign's products that take this reward (spec rule 1): those offered in its currency
    whose range holds its value. A campaign may hold products of several currencies and ranges
    (ALL_FEE_FREE does); the reward offers the ones that fit, and is refused only when none does.
    Products the request names itself are checked one by one instead (_check_named_products)."""
    in_currency = [(pid, band) for pid in campaign.products
                   if (product := catalog_rows.get(pid)) is not None
                   and (band := catalog.band_for(product, currency)) is not None]
    if not in_currency:
        errors.add(loc + ("campaign_id",), f"none of campaign {campaign.id}'s products is offered in {currency}")
        return []
    fitting = [pid for pid, band in in_currency if not cents or band["min_cents"] <= cents <= band["max_cents"]]
    if not fitting:
        low, high = min(b["min_cents"] for _, b in in_currency), max(b["max_cents"] for _, b in in_currency)
        errors.add(loc + ("value", "denomination"),
                   f"no product of campaign {campaign.id} takes this value: their ranges lie between "
                   f"{amount_in(low, currency)} and {amount_in(high, currency)} {currency}")
    return fitting


def _field_values(errors: _Errors, loc: tuple, r: RewardIn, org_fields: dict) -> list[tuple]:
    values, seen = [], set()
    for i, cf in enumerate(r.custom_fields or []):
        here = loc + ("custom_fields", i)
        field_row = org_fields.get(cf.id)
        if field_row is None:
            errors.missing(here + ("id",), f"custom field {cf.id} not found")
            continue
        if cf.id in seen:
            errors.add(here + ("id",), "is given more than once")
            continue
        seen.add(cf.id)
        if cf.value is None:  # no value for this field on this reward
            if field_row.required:
                errors.add(here + ("value",), f"is required: {field_row.label!r} is a required field")
            continue
        problem = fields_service.check_value(field_row, cf.value)
        if problem:
            errors.add(here + ("value",), problem)
            continue
        values.append((field_row, fields_service.stored_value(field_row, cf.value)))
    for field_row in org_fields.values():
        if field_row.required and field_row.id not in seen:
            errors.add(loc + ("custom_fields",), f"the required field {field_row.label!r} is missing")
    # By label, then field id: the order every read gives them (repository._FIELD_VALUES), so
    # the create response and a later GET of the reward list them alike.
    values.sort(key=lambda pair: (pair[0].label, pair[0].id))
    return values


def _write(conn: Connection, plan: _Plan, request_hash: str | None, *, has_webhook: bool) -> dict[str, str]:
    order = plan.order_row
    order["request_hash"] = request_hash  # an external_id's order's (None without one)
    if conn.dialect.name == "postgresql":
        return _write_postgres(conn, plan, has_webhook=has_webhook)
    _INSERT_ORDER.execute_many(conn, [order])
    _INSERT_REWARDS.execute_many(conn, plan.reward_rows)
    _INSERT_FIELD_VALUES.execute_many(conn, plan.field_rows)
    _INSERT_JOBS.execute_many(conn, plan.job_rows)
    links = tokens.issue_many(conn, plan.link_reward_ids)
    funding.debit(conn, funding_source_id=plan.funding_source_id, organization_id=order["organization_id"],
                  amount_cents=order["total_cents"], kind="order", order_id=order["id"])
    if order["status"] == approvals.PENDING:
        funding.hold(conn, funding_source_id=plan.funding_source_id, amount_cents=order["total_cents"])
    webhooks.emit(conn, order["organization_id"], [("ORDERS.CREATED", order["id"])], has_webhook=has_webhook)
    return links


def _write_postgres(conn: Connection, plan: _Plan, *, has_webhook: bool) -> dict[str, str]:
    """The same writes as _write, as one statement (orders/pg_write.py says why)."""
    order = plan.order_row
    org = order["organization_id"]
    links, token_rows = tokens.new_tokens(plan.link_reward_ids)
    job_rows = plan.job_rows + (webhooks.job_rows(org, [("ORDERS.CREATED", order["id"])]) if has_webhook else [])
    pg_write.write_order(conn, order=order, reward_rows=plan.reward_rows, field_rows=plan.field_rows,
                         job_rows=job_rows, token_rows=token_rows, ledger_row={
                             "funding_source_id": plan.funding_source_id, "organization_id": org,
                             "amount_cents": -order["total_cents"], "balance_after_cents": None, "kind": "order",
                             "memo": None, "order_id": order["id"], "reward_id": None,
                             "created_at": order["created_at"]})
    return links


__all__ = ["ApiError", "PlacedOrder", "place_order"]
