"""GET /forex (API.md §1 P2): the rates in force against a base currency."""

from __future__ import annotations

from fastapi import APIRouter, Request

from largesse.auth import CallerDep
from largesse.forex import service
from largesse.schemas import Out
from largesse.web import EngineDep, clean_text, json_response, q_str, query_doc, read_db

router = APIRouter(tags=["forex"])


class ForexOut(Out):
    forex: dict[str, float]


@router.get("/forex", response_model=ForexOut,
            openapi_extra=query_doc(q_str("base", "the currency the rates are per unit of (default USD)")))
async def list_forex(request: Request, caller: CallerDep, engine: EngineDep):
    """Units of each currency per unit of `base` (default USD); 400 for a base without a rate."""
    base = clean_text(request.query_params.get("base") or "USD", "base", max_length=10)
    return json_response({"forex": await read_db(engine, service.table_for, base)})
