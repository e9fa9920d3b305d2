"""/fields: custom field definitions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import Field, StrictBool

from largesse.auth import CallerDep
from largesse.fields import service
from largesse.schemas import Out, Text, Wire
from largesse.web import EngineDep, json_response, read_db, write_db

router = APIRouter(tags=["fields"])


class FieldData(Wire):
    options: list[Text(200, 1)] | None = Field(default=None, max_length=500)
    # API.md §3 Field: option -> the label shown for it (Dropdown and List fields)
    labels: dict[Text(200, 1), Text(200)] | None = Field(default=None, max_length=500)


class CreateFieldIn(Wire):
    # At most 100 characters once folded (fields.service.label_of: NFC, runs of spaces): a
    # decomposed é is two code points here and one letter in the label, so the bound on the
    # text as sent is looser and the service measures the label.
    display_name: Annotated[Text(1000, 1), Field(description="At most 100 characters in Unicode NFC, "
                                                             "runs of spaces folded to one")]
    data_type: Text(20, 1)
    data: FieldData | None = None
    required: StrictBool = False
    description: Text(1000) | None = None


class FieldOut(Out):
    id: str
    label: str
    data_type: str
    data: dict
    required: bool
    scope: str


class FieldList(Out):
    fields: list[FieldOut]


class FieldEnvelope(Out):
    field: FieldOut


@router.get("/fields", response_model=FieldList)
async def list_fields(caller: CallerDep, engine: EngineDep):
    rows = await read_db(engine, service.list_for, caller.organization_id)
    return json_response({"fields": [service.to_wire(r) for r in rows]})


@router.post("/fields", response_model=FieldEnvelope)
async def create_field(body: CreateFieldIn, caller: CallerDep, engine: EngineDep):
    """Define a custom field; its `label` (the display name, spaces folded) is the query
    parameter name used to search rewards."""
    row = await write_db(
        engine, service.create, organization_id=caller.organization_id, display_name=body.display_name,
        data_type=body.data_type, options=body.data.options if body.data else None,
        labels=body.data.labels if body.data else None,
        required=body.required, description=body.description,
    )
    return json_response({"field": service.to_wire(row)})
