"""/rewards/{id}/resend, /rewards/{id}/cancel, /rewards/{id}/generate_link (API.md §1, §2.5)."""

from __future__ import annotations

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict

from largesse.auth import CallerDep
from largesse.delivery import service
from largesse.web import EngineDep, SettingsDep, json_response

router = APIRouter(tags=["rewards"])


class ResendIn(BaseModel):
    """At most one of the two; both absent resends to the same address."""

    model_config = ConfigDict(extra="ignore")
    updated_email: str | None = None
    updated_phone: str | None = None


class Empty(BaseModel):
    pass


class LinkOut(BaseModel):
    id: str
    link: str


class LinkEnvelope(BaseModel):
    reward: LinkOut


@router.post("/rewards/{reward_id}/resend", response_model=Empty)
def resend_reward(reward_id: str, caller: CallerDep, engine: EngineDep, settings: SettingsDep,
                  body: ResendIn | None = Body(default=None)):
    """Deliver again a reward whose delivery FAILED, optionally to `updated_email` (EMAIL
    rewards) or `updated_phone` (PHONE rewards). The body may be absent or empty."""
    body = body or ResendIn()
    service.resend_reward(engine, settings, org=caller.organization_id, reward_id=reward_id,
                          updated_email=body.updated_email, updated_phone=body.updated_phone)
    return json_response({})


@router.post("/rewards/{reward_id}/cancel", response_model=Empty)
def cancel_reward(reward_id: str, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    """Cancel an unredeemed, unexpired reward whose delivery failed (any unredeemed one with
    LARGESSE_CANCEL_ANY_UNREDEEMED=1); its value and fee go back to the balance (once). 422
    when its delivery has not failed, or it was already redeemed, canceled or expired."""
    service.cancel_reward(engine, org=caller.organization_id, reward_id=reward_id,
                          any_delivery=settings.cancel_any_unredeemed)
    return json_response({})


@router.post("/rewards/{reward_id}/generate_link", response_model=LinkEnvelope)
def generate_reward_link(reward_id: str, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    """A new redemption link for a LINK reward (403 for other delivery methods). Links
    generated earlier keep working."""
    link = service.generate_link(engine, settings, org=caller.organization_id, reward_id=reward_id)
    return json_response({"reward": {"id": reward_id, "link": link}})
