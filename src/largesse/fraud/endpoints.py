"""/fraud_rules and /fraud_reviews (API.md §1 P2, §2.10, §3 FraudReview, FraudRule)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from largesse import db
from largesse.auth import CallerDep
from largesse.errors import BadRequest
from largesse.fraud import reviews, service
from largesse.jsonbody import read_object
from largesse.schemas import Out
from largesse.web import (
    EngineDep,
    Paging,
    SettingsDep,
    clean_text,
    json_response,
    q_str,
    q_time,
    query_doc,
    read_db,
    run_db,
    timestamp_param,
    write_db,
)

router = APIRouter(tags=["fraud"])


class MessageOut(Out):
    message: str


class FraudRuleOut(Out):
    rule_type: str
    config: dict[str, Any]


class FraudRuleList(Out):
    fraud_rules: list[FraudRuleOut]


class FraudReviewEnvelope(Out):
    fraud_review: dict[str, Any]


class FraudReviewList(Out):
    fraud_reviews: list[dict[str, Any]]
    total_count: int


RULE_BODY = {"requestBody": {"required": False, "content": {"application/json": {"schema": {
    "type": "object", "properties": {"config": {"type": "object"}}}}}}}
LIST_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["operation", "config"],
    "properties": {"operation": {"type": "string", "enum": ["add", "remove"]}, "config": {"type": "object"}}}}}}}


@router.get("/fraud_rules", response_model=FraudRuleList)
async def list_fraud_rules(caller: CallerDep, engine: EngineDep):
    """The organization's fraud rules and their configs."""
    rules = await read_db(engine, service.list_rules, caller.organization_id)
    return json_response({"fraud_rules": rules})


@router.post("/fraud_rules/{rule_type}", response_model=MessageOut, openapi_extra=RULE_BODY)
async def fraud_rule(rule_type: str, request: Request, caller: CallerDep, engine: EngineDep):
    """Create or replace the rule of this type (body `{"config": {...}}`, §2.10)."""
    rule_type, config = service.validated(rule_type, read_object(await request.body()))
    message = await write_db(engine, service.upsert_rule, caller.organization_id, rule_type, config)
    return json_response({"message": message})


@router.post("/fraud_rules/{rule_type}/update_list", response_model=MessageOut, openapi_extra=LIST_BODY)
async def update_fraud_rule_list(rule_type: str, request: Request, caller: CallerDep, engine: EngineDep):
    """Add entries to, or remove them from, a list of the stored rule's config."""
    body = read_object(await request.body())
    message = await write_db(engine, service.update_rule_list, caller.organization_id, rule_type, body)
    return json_response({"message": message})


@router.delete("/fraud_rules/{rule_type}", response_model=MessageOut)
async def delete_fraud_rule(rule_type: str, caller: CallerDep, engine: EngineDep):
    message = await write_db(engine, service.delete_rule, caller.organization_id, rule_type)
    return json_response({"message": message})


PAGING = Paging(limit=10, high=100)  # API.md §1


@router.get("/fraud_reviews", response_model=FraudReviewList, openapi_extra=query_doc(
    PAGING.doc(), q_str("status", "flagged, blocked or released", enum=service.REVIEW_STATUSES),
    [q_time(f"{field}[{bound}]") for field in ("created_at", "redeemed_at") for bound in ("gte", "lte")]))
async def list_fraud_reviews(request: Request, caller: CallerDep, engine: EngineDep):
    """Held redemptions, newest first. Query: offset, limit (1..100, default 10), status
    (flagged, blocked, released), created_at[gte|lte] (the reward's), redeemed_at[gte|lte]."""
    offset, limit = PAGING.read(request)
    status = request.query_params.get("status") or None  # empty: as if absent (docs/api.md)
    if status is not None and status.lower() not in service.REVIEW_STATUSES:
        raise BadRequest("status must be flagged, blocked or released", {"status": ["is not a review status"]})
    filters = {name.replace("[", "_").rstrip("]"): timestamp_param(request, name)
               for name in ("created_at[gte]", "created_at[lte]", "redeemed_at[gte]", "redeemed_at[lte]")}
    items, total = await read_db(
        engine, reviews.list_reviews, caller.organization_id, offset=offset, limit=limit,
        status=status.lower() if status else None, created_gte=filters["created_at_gte"],
        created_lte=filters["created_at_lte"], redeemed_gte=filters["redeemed_at_gte"],
        redeemed_lte=filters["redeemed_at_lte"])
    return json_response({"fraud_reviews": items, "total_count": total})


@router.get("/fraud_reviews/{reward_id}", response_model=FraudReviewEnvelope)
async def get_fraud_review(reward_id: str, caller: CallerDep, engine: EngineDep):
    """The review of a held redemption, by reward ID, with risk and related rewards."""
    clean_text(reward_id, "id", max_length=64)
    review = await read_db(engine, reviews.get_review, caller.organization_id, reward_id)
    return json_response({"fraud_review": review})


@router.put("/fraud_reviews/{reward_id}/release", response_model=FraudReviewEnvelope)
async def release_fraud_review(reward_id: str, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    """Issue the payout the recipient chose, once: a released review again is 200 as it is. 422
    (which the 6.0 client does not decode: `.data` is None, the error body is in `.body`) when
    it was blocked, the reward is no longer open, or the chosen product cannot be issued."""
    review = await run_db(engine, db.retrying, reviews.release, engine, settings, org=caller.organization_id,
                          reward_id=reward_id, key_id=caller.key_id)
    return json_response({"fraud_review": review})


@router.put("/fraud_reviews/{reward_id}/block", response_model=FraudReviewEnvelope)
async def block_fraud_review(reward_id: str, caller: CallerDep, engine: EngineDep):
    """Cancel the reward and refund it to the balance, once: a blocked review again is 200 as it
    is; 422 when it was released."""
    review = await run_db(engine, db.retrying, reviews.block, engine, org=caller.organization_id,
                          reward_id=reward_id, key_id=caller.key_id)
    return json_response({"fraud_review": review})
