"""/campaigns."""

from __future__ import annotations

import re

from fastapi import APIRouter
from pydantic import Field, StrictBool, StrictInt, field_validator

from largesse.auth import CallerDep
from largesse.campaigns import service
from largesse.config import MAX_EXPIRY_DAYS
from largesse.schemas import Id, Name, Out, Text, Wire
from largesse.web import EngineDep, clean_text, json_response, read_db, write_db

router = APIRouter(tags=["campaigns"])

COLOR = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})\Z")


def _color(value: str | None) -> str | None:
    if value is not None and not COLOR.match(value):
        raise ValueError("must be a hex colour such as #1A73E8")
    return value


def _url(value: str | None) -> str | None:
    if value is not None and not value.startswith(("https://", "http://")):
        raise ValueError("must be an http(s) URL")
    return value


class WebpageStyle(Wire):
    headline: Text(200) | None = None
    message: Text(5000) | None = None
    logo_image_url: Text(2000) | None = None
    logo_image_height_px: StrictInt | None = Field(default=None, ge=1, le=400)
    logo_background_color: Text(7) | None = None
    background_color: Text(7) | None = None

    _colors = field_validator("logo_background_color", "background_color")(_color)
    _urls = field_validator("logo_image_url")(_url)


class EmailStyle(Wire):
    sender_name: Text(200) | None = None
    subject_line: Text(300) | None = None
    logo_image_url: Text(2000) | None = None
    logo_image_height_px: StrictInt | None = Field(default=None, ge=1, le=400)
    logo_background_color: Text(7) | None = None
    button_color: Text(7) | None = None

    _colors = field_validator("logo_background_color", "button_color")(_color)
    _urls = field_validator("logo_image_url")(_url)


class AutoAddRule(Wire):
    enabled: StrictBool
    countries: list[Text(2, 2)] | None = Field(default=None, min_length=1)
    currencies: list[Text(3, 3)] | None = Field(default=None, min_length=1)


class CampaignFields(Wire):
    description: Text(5000) | None = None
    fee_charged_to: Text(20) | None = None
    auto_add_product_rule: AutoAddRule | None = None
    webpage_style: WebpageStyle | None = None
    email_style: EmailStyle | None = None
    reward_expiry_days: StrictInt | None = Field(default=None, ge=1, le=MAX_EXPIRY_DAYS)


class CreateCampaignIn(CampaignFields):
    name: Text(200, 1)
    products: list[Id] = Field(max_length=500)


class UpdateCampaignIn(CampaignFields):
    name: Text(200, 1) | None = None
    products: list[Id] | None = Field(default=None, max_length=500)


class CampaignOut(Out):
    id: str
    name: str
    description: str | None
    products: list[str]


class CampaignEnvelope(Out):
    campaign: CampaignOut


class CampaignList(Out):
    campaigns: list[CampaignOut]


def _values(body: Wire) -> dict:
    return body.model_dump(exclude_unset=True, mode="json")


@router.get("/campaigns", response_model=CampaignList)
async def list_campaigns(caller: CallerDep, engine: EngineDep):
    rows = await read_db(engine, service.list_for, caller.organization_id)
    return json_response({"campaigns": [service.to_wire(r) for r in rows]})


@router.get("/campaigns/{campaign_id}", response_model=CampaignEnvelope)
async def get_campaign(campaign_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(campaign_id, "id", max_length=200)
    row = await read_db(engine, service.get_or_404, caller.organization_id, campaign_id)
    return json_response({"campaign": service.to_wire(row)})


@router.post("/campaigns", response_model=CampaignEnvelope)
async def create_campaign(body: CreateCampaignIn, caller: CallerDep, engine: EngineDep):
    """Create a campaign; `products` may contain ALL_FEE_FREE."""
    row = await write_db(engine, service.create, caller.organization_id, _values(body))
    return json_response({"campaign": service.to_wire(row)})


@router.put("/campaigns/{campaign_id}", response_model=CampaignEnvelope)
async def update_campaign(campaign_id: str, body: UpdateCampaignIn, caller: CallerDep, engine: EngineDep):
    """Update the given keys of a campaign; a style object updates only the keys it names."""
    clean_text(campaign_id, "id", max_length=200)
    row = await write_db(engine, service.update, caller.organization_id, campaign_id, _values(body))
    return json_response({"campaign": service.to_wire(row)})


__all__ = ["Name", "router"]
