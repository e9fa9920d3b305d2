"""POST /reports, GET /reports/{id} (API.md §1 P2, §2.9, §3 Report), and the download link
GET /reports/download/{token}, served outside /api/v2 (the token is the credential)."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from largesse import db
from largesse.auth import CallerDep
from largesse.errors import ApiError, NotFound
from largesse.jsonbody import read_object
from largesse.redemption.security import load_csrf_key
from largesse.reports import service
from largesse.reports.models import report_chunks
from largesse.schemas import Out
from largesse.timeutil import utcnow
from largesse.web import EngineDep, json_response, run_db, write_db

router = APIRouter(tags=["reports"])
download_router = APIRouter(include_in_schema=False)
TOKEN = re.compile(r"[0-9a-f]{64}")

CREATE_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["report_type", "format"],
    "properties": {"report_type": {"type": "string", "enum": ["digital_rewards"]},
                   "format": {"type": "string", "enum": ["csv"]},
                   "filters": {"type": "object", "properties": {"digital_rewards": {"type": "object"}}}}}}}}}


class ReportOut(Out):
    id: str
    status: str
    created_at: str | None = None
    expected_completion_at: str | None = None
    url: str | None = None


class ReportEnvelope(Out):
    report: ReportOut


class Gone(ApiError):
    status_code = 410


def _linker(request: Request, key: bytes):
    base = request.app.state.settings.public_url.rstrip("/")

    def link(report_id: str, salt: str) -> str:
        return f"{base}{service.DOWNLOAD_PATH}{service.token_for(key, report_id, salt)}"

    return link


async def _key(request: Request) -> bytes:
    state = request.app.state
    if getattr(state, "redemption_csrf_key", None) is None:
        state.redemption_csrf_key = await run_db(state.engine, load_csrf_key, state.engine, state.settings)
    return state.redemption_csrf_key


@router.post("/reports", response_model=ReportEnvelope, openapi_extra=CREATE_BODY)
async def create_report(request: Request, caller: CallerDep, engine: EngineDep):
    """Request a CSV of the organization's rewards (`digital_rewards`, `csv`, optional
    filters). Answers at once with status CREATED; the worker generates it. 429 when
    20 reports of the organization are already in progress (service.MAX_IN_PROGRESS)."""
    body = read_object(await request.body())
    report = await write_db(engine, service.create, caller.organization_id, caller.key_id, body)
    return json_response({"report": report, "message": "The report is being generated."})


@router.get("/reports/{report_id}", response_model=ReportEnvelope, responses={202: {"model": ReportEnvelope}})
async def get_report(report_id: str, request: Request, caller: CallerDep, engine: EngineDep):
    """202 while CREATED or PROCESSING; 200 with `url` (valid 7 days) once READY_FOR_DOWNLOAD, or FAILED."""
    link = _linker(request, await _key(request))

    def load():
        with db.read(engine) as conn:
            return service.get(conn, caller.organization_id, report_id, link)

    report = await run_db(engine, db.retrying, load)
    status = 202 if report["status"] in service.IN_PROGRESS else 200
    return json_response({"report": report}, status_code=status)


@download_router.get(service.DOWNLOAD_PATH + "{token}")
async def download_report(token: str, request: Request):
    """The CSV, streamed chunk by chunk from the database."""
    engine = request.app.state.engine
    if not TOKEN.fullmatch(token):
        raise NotFound("Report link not found", {"token": ["not found"]})

    def find():
        with db.read(engine) as conn:
            return service.find_download(conn, token, utcnow(), request.app.state.settings.environment)

    row, why = await run_db(engine, db.retrying, find)
    if row is None:
        if why == "expired":
            raise Gone("This report link has expired; create the report again", {"token": ["expired"]})
        raise NotFound("Report link not found", {"token": ["not found"]})
    report_id, generation = row.id, row.generation

    def chunk(seq: int) -> str | None:
        with db.read(engine) as conn:
            return conn.execute(report_chunks.select().with_only_columns(report_chunks.c.data).where(
                report_chunks.c.report_id == report_id, report_chunks.c.generation == generation,
                report_chunks.c.seq == seq)).scalar()

    async def body():
        # Stops at the file's size, when it is known: a client that has its Content-Length closes
        # the connection, and one more query, to learn that no chunk follows, was cancelled on
        # the way (PostgreSQL: psycopg then closed its pooled connection, with a warning).
        seq, sent = 0, 0
        while row.byte_size is None or sent < row.byte_size:
            data = await run_db(engine, chunk, seq)
            if data is None:
                return
            encoded = data.encode()
            sent += len(encoded)
            yield encoded
            seq += 1

    filename = f"largesse-rewards-{row.id}-{row.completed_at:%Y%m%d}.csv"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "private, no-store",
               "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
    if row.byte_size is not None:
        headers["Content-Length"] = str(row.byte_size)
    return StreamingResponse(body(), media_type="text/csv; charset=utf-8", headers=headers)
