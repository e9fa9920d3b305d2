"""/topups (API.md §1 P1, §2.6 CreateTopup, §3 Topup)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from largesse.auth import CallerDep
from largesse.money import Amount, ExactJsonModel, exact_amount
from largesse.schemas import Out, Text, Wire
from largesse.topups import service
from largesse.web import (
    EngineDep,
    Paging,
    json_body_doc,
    json_response,
    parse_json_body,
    query_doc,
    read_db,
    run_db,
)

router = APIRouter(tags=["topups"])


class CreateTopupIn(Wire, ExactJsonModel):
    funding_source_id: Text(200, 1)
    idempotency_key: Text(200, 1)
    amount: Amount

    def adopt_exact_numbers(self, data: Any) -> None:
        exact = exact_amount(data, "amount")
        if exact is not None:
            self.__dict__["amount"] = exact


class TopupOut(Out):
    id: str
    status: str


class TopupEnvelope(Out):
    topup: TopupOut


class TopupList(Out):
    topups: list[TopupOut]
    total_count: int


def read_body(raw: bytes, model):
    # The client sends create_topup without a body as an empty JSON request (API.md §7.9): {}.
    return parse_json_body(model, raw if raw.strip() else b"{}")


@router.post("/topups", response_model=TopupEnvelope, openapi_extra=json_body_doc(CreateTopupIn))
async def create_topup(request: Request, caller: CallerDep, engine: EngineDep):
    """Request a top-up of a balance: `created` until the operator credits or rejects it
    (`largesse topups credit|reject`). The same idempotency_key returns the same top-up;
    with other values it is a 409."""
    body = read_body(await request.body(), CreateTopupIn)
    created = await run_db(engine, service.create, engine, org=caller.organization_id,
                           funding_source_id=body.funding_source_id, idempotency_key=body.idempotency_key,
                           amount=body.amount)
    return json_response({"topup": created.topup})


PAGING = Paging(limit=10, high=100)


@router.get("/topups", response_model=TopupList, openapi_extra=query_doc(PAGING.doc()))
async def list_topups(request: Request, caller: CallerDep, engine: EngineDep):
    """Top-ups, newest first. Query: offset, limit (default 10, max 100)."""
    offset, limit = PAGING.read(request)
    items, total = await read_db(engine, service.page, caller.organization_id, offset=offset, limit=limit)
    return json_response({"topups": items, "total_count": total})


@router.get("/topups/{id}", response_model=TopupEnvelope)
async def get_topup(id: str, caller: CallerDep, engine: EngineDep):  # noqa: A002 - the client's name
    return json_response({"topup": await read_db(engine, service.get, caller.organization_id, id)})
