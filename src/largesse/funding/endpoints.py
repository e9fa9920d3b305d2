"""/funding_sources."""

from __future__ import annotations

from fastapi import APIRouter

from largesse.auth import CallerDep
from largesse.errors import NotFound
from largesse.funding import service
from largesse.money import to_wire
from largesse.schemas import Out
from largesse.web import EngineDep, clean_text, json_response, read_db

router = APIRouter(tags=["funding sources"])


class FundingSourceOut(Out):
    id: str
    method: str
    meta: dict


class FundingSourceList(Out):
    funding_sources: list[FundingSourceOut]


class FundingSourceEnvelope(Out):
    funding_source: FundingSourceOut


def to_wire_source(row) -> dict:
    return {
        "id": row.id,
        "method": row.method,
        "status": row.status,
        "usage_permissions": ["api_orders", "dashboard_orders"],
        "meta": {
            "available_cents": int(row.available_cents),
            "pending_cents": int(row.pending_cents),
            "available_amount": to_wire(int(row.available_cents)),
            "pending_amount": to_wire(int(row.pending_cents)),
            "currency_code": row.currency_code,
        },
    }


@router.get("/funding_sources", response_model=FundingSourceList)
async def list_funding_sources(caller: CallerDep, engine: EngineDep):
    rows = await read_db(engine, service.list_for, caller.organization_id)
    return json_response({"funding_sources": [to_wire_source(r) for r in rows]})


@router.get("/funding_sources/{funding_source_id}", response_model=FundingSourceEnvelope)
async def get_funding_source(funding_source_id: str, caller: CallerDep, engine: EngineDep):
    """A funding source by ID, or the keyword BALANCE (any case)."""
    clean_text(funding_source_id, "id", max_length=200)
    if funding_source_id.upper() in service.UNSUPPORTED_METHODS:
        # No invoice funding source exists here; 404 is what get_funding_source decodes.
        raise NotFound(f"No {funding_source_id.upper()} funding source", {"id": ["not found"]})
    row = await read_db(engine, service.resolve, caller.organization_id, funding_source_id)
    return json_response({"funding_source": to_wire_source(row)})
