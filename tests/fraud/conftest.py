"""Fraud test kit: LINK rewards redeemed on the real page from a chosen client address."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from largesse import db
from largesse.delivery.models import jobs
from largesse.funding.models import ledger_entries
from largesse.redemption.models import payouts
from tests.conftest import order_body
from tests.redemption.conftest import GIFT_CARD, csrf_of, fake_ip, page_client


def link_reward(org, *, email: str | None = None, denomination=25, products=(GIFT_CARD,)) -> tuple[str, str]:
    with org.http() as http:
        response = http.post("/orders", json=order_body(email or org.member_email, method="LINK",
                                                        products=products, denomination=denomination))
    assert response.status_code == 200, response.text
    reward = response.json()["order"]["rewards"][0]
    return reward["id"], reward["delivery"]["link"]


def tagged(address: str, tag: str) -> str:
    local, _, domain = address.partition("@")
    return f"{local}+{tag}@{domain}"


def redeem(link: str, *, ip: str | None = None, product: str = GIFT_CARD, cookies: dict | None = None) -> str:
    """Choose `product` on the page from address `ip`; returns the page shown afterwards."""
    with page_client(ip or fake_ip()) as client:
        if cookies:
            client.cookies.update(cookies)
        page = client.get(link)
        assert page.status_code == 200, page.text
        done = client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": product})
        assert done.status_code == 303, done.text
        return client.get(link).text


def payout_count(engine, reward_id: str) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(func.count()).select_from(payouts).where(payouts.c.reward_id == reward_id)
                            ).scalar_one()


def refund_count(engine, reward_id: str) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(func.count()).select_from(ledger_entries).where(
            ledger_entries.c.reward_id == reward_id, ledger_entries.c.kind == "reward_refund")).scalar_one()


def events_for(engine, org_id: str, resource_id: str) -> list[str]:
    with db.read(engine) as conn:
        rows = conn.execute(select(jobs.c.payload).where(jobs.c.organization_id == org_id,
                                                         jobs.c.kind == "deliver_webhook")
                            .order_by(jobs.c.id)).scalars().all()
    return [p["event"] for p in rows if p["payload"]["resource"]["id"] == resource_id]


@pytest.fixture
def webhook(org):
    """A webhook for the organization, so that its events are queued (nothing listens)."""
    with org.http() as http:
        assert http.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"}).status_code == 200
