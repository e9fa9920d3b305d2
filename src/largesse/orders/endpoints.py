"""/orders and /rewards (read side)."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request

from largesse import auth, db
from largesse.auth import CallerDep, parse_authorization
from largesse.errors import BadRequest, NotFound
from largesse.fields import service as fields_service
from largesse.orders import repository, service
from largesse.orders.schemas import (
    MAX_CUSTOM_FIELDS,
    CreateOrderIn,
    OrderEnvelope,
    OrderList,
    RewardEnvelope,
    RewardList,
)
from largesse.web import (
    EngineDep,
    Paging,
    clean_text,
    echoable,
    json_body_doc,
    json_response,
    parse_json_body,
    q_str,
    q_time,
    query_doc,
    run_db,
    timestamp_param,
)

router = APIRouter(tags=["orders"])

PAGINATION = ("offset", "limit")


@router.post("/orders", response_model=OrderEnvelope, responses={201: {"model": OrderEnvelope}},
             openapi_extra=json_body_doc(CreateOrderIn))
async def create_order(request: Request):
    """Create an order of one (`reward`) or more (`rewards`) rewards, paid from the balance.

    200 for a new order; 201 with the original order for an identical replay of an
    `external_id`; 409 when the `external_id` was used with other parameters.
    """
    # The hottest route reads its own request: pydantic parses the JSON bytes directly and
    # FastAPI solves no dependencies (docs/benchmarks.md has the measured difference). In a
    # server built by create_app, orders/fast_route.py calls `place` before routing even starts.
    return await place(request.app.state, request.headers.get("authorization"), await request.body())


async def place(state, authorization: str | None, raw_body: bytes):
    """POST /orders from its Authorization header and raw body: the one implementation, behind
    the routed endpoint above and the plain ASGI route (orders/fast_route.py)."""
    settings = state.settings
    credentials = parse_authorization(authorization, writes=True, environment=settings.environment)
    body = parse_json_body(CreateOrderIn, raw_body)
    engine = state.engine
    # db.retrying: a serialization failure or deadlock rolled the order back; placing it again is safe.
    placed = await run_db(engine, db.retrying, service.place_order, engine, settings=settings,
                          credentials=credentials, body=body)
    return json_response({"order": placed.order}, status_code=201 if placed.replay else 200)


ORDERS_PAGING, REWARDS_PAGING = Paging(limit=10, high=500), Paging(limit=100, high=500)


@router.get("/orders", response_model=OrderList, openapi_extra=query_doc(
    ORDERS_PAGING.doc(), q_str("campaign_id", "orders of this campaign"),
    q_str("external_id", "the order with this external_id"), q_time("created_at[gte]"), q_time("created_at[lte]")))
async def list_orders(request: Request, caller: CallerDep, engine: EngineDep):
    """Orders, newest first. Query: offset, limit (default 10, max 500), campaign_id, external_id,
    created_at[gte], created_at[lte]."""
    offset, limit = ORDERS_PAGING.read(request)
    # Empty is as if absent, as for every query parameter (docs/api.md).
    campaign_id = request.query_params.get("campaign_id") or None
    external_id = request.query_params.get("external_id") or None
    for name, value in (("campaign_id", campaign_id), ("external_id", external_id)):
        if value is not None:
            clean_text(value, name, max_length=200)
    gte = timestamp_param(request, "created_at[gte]")
    lte = timestamp_param(request, "created_at[lte]")

    def load():
        with db.read(engine) as conn:
            rows, total = repository.list_orders(
                conn, caller.organization_id, offset=offset, limit=limit, campaign_id=campaign_id,
                external_id=external_id, created_gte=gte, created_lte=lte,
            )
            return repository.orders_to_wire(conn, rows), total

    wire, total = await run_db(engine, db.retrying, load)
    return json_response({"orders": wire, "total_count": total})


@router.get("/orders/{order_id}", response_model=OrderEnvelope)
async def get_order(order_id: str, caller: CallerDep, engine: EngineDep):
    """An order by its ID or by its external_id."""
    clean_text(order_id, "id", max_length=200)

    def load():
        with db.read(engine) as conn:
            row = repository.order_or_404(conn, caller.organization_id, order_id)
            return repository.orders_to_wire(conn, [row])[0]

    return json_response({"order": await run_db(engine, db.retrying, load)})


@router.get("/rewards", response_model=RewardList, openapi_extra=query_doc(REWARDS_PAGING.doc(), {
    "name": "filters", "in": "query", "required": False, "style": "form", "explode": True,
    "schema": {"type": "object", "additionalProperties": {"type": "string"}},
    "description": "Custom-field filters: each other parameter is a field's label (`?Department=Sales`); "
                   "a reward matches when it has every given value"}))
async def list_rewards(request: Request):
    """Rewards, newest first. Every query parameter other than offset and limit is a custom
    field label whose value must match exactly; all given labels must match."""
    # A list page reads its own request, as POST /orders does: FastAPI solves no dependencies.
    credentials = await auth.bearer(request)
    engine, settings = request.app.state.engine, request.app.state.settings
    try:
        offset, limit = REWARDS_PAGING.read(request)
        # One value per label (the label as fields_service folds it), the last one given: as for
        # every query parameter (docs/api.md), a repeated filter is not two conditions.
        filters = list({
            label: (label, clean_text(v, k[:100], max_length=1000))
            for k, v in request.query_params.multi_items() if k not in PAGINATION
            for label in (fields_service.label_of(clean_text(k, "label", max_length=1000)),)
        }.values())
        for name, _ in filters:  # measured as stored (NFC, spaces folded), as POST /fields does
            if len(name) > fields_service.LABEL_MAX:
                raise BadRequest("label is too long",
                                 {"label": [f"must be at most {fields_service.LABEL_MAX} characters"]})
        for name, _ in filters:
            if not fields_service.can_be_label(name):  # e.g. created_at[gte]: a filter this list has not
                raise BadRequest(f"{echoable(name)} is not a filter of this list: GET /rewards filters by "
                                 "custom field labels (letters, digits, spaces, underscores), offset and limit",
                                 {echoable(name): ["is not a custom field label"]})
        if len(filters) > MAX_CUSTOM_FIELDS:  # a reward has at most that many: more match nothing
            raise BadRequest("Too many custom field filters",
                             {"custom_fields": [f"at most {MAX_CUSTOM_FIELDS} labels per search"]})
        problem = None
    except BadRequest as exc:
        problem = exc
    created_format = _list_timestamps(settings.reward_list_timestamps, request.headers.get("user-agent", ""))

    def load():
        with db.read(engine) as conn:
            # The key is verified in the page's transaction (one transaction per request, as
            # POST /orders does); a bad key is still answered before a bad query parameter.
            caller = auth.verify(conn, credentials)
            if problem is not None:
                raise problem
            return repository.search_rewards(
                conn, caller.organization_id, offset=offset, limit=limit, created_format=created_format,
                filters=fields_service.search_values(conn, caller.organization_id, filters))

    wire, total = await run_db(engine, db.retrying, load)
    return json_response({"rewards": wire, "total_count": total})


# The official clients (Python, which parses date-times strictly and refuses the
# specification's "2024-01-01 12:00:00 UTC"; Node, whose date-time strings only V8's lenient
# Date reads in that form) and other clients generated from Tremendous' OpenAPI document.
_STRICT_DATE_CLIENTS = re.compile(r"(?i)^(tremendous (python|node)|openapi-generator/)")


def _list_timestamps(setting: str, user_agent: str) -> str:
    """GET /rewards' created_at form (LARGESSE_REWARD_LIST_TIMESTAMPS, docs/api.md): `auto`
    gives the specification's form, and ISO 8601 to a client that cannot parse it."""
    if setting == "auto":
        return "iso8601" if _STRICT_DATE_CLIENTS.match(user_agent) else "spec"
    return setting


@router.get("/rewards/{reward_id}", response_model=RewardEnvelope)
async def get_reward(reward_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(reward_id, "id", max_length=200)

    def load():
        with db.read(engine) as conn:
            row = repository.get_reward(conn, caller.organization_id, reward_id)
            if row is None:
                raise NotFound(f"Reward {reward_id} not found", {"id": ["not found"]})
            return repository.rewards_to_wire(conn, [row])[0]

    return json_response({"reward": await run_db(engine, db.retrying, load)})
