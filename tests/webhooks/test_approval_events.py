"""ORDERS.APPROVED and ORDERS.CANCELED reach the organization's webhook through the outbox."""

from __future__ import annotations

from tremendous import CreateWebhookRequest

from largesse import db
from largesse.orders import approvals
from tests.conftest import failing
from tests.delivery.conftest import wait_for
from tests.factories import many_rewards_body, ok, order_body
from tests.webhooks.kit import settle


def test_approval_and_rejection_events(org, api, http, receiver, engine, fast):
    settings = fast()
    settle(engine, settings)
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
    api.create_webhook(CreateWebhookRequest(url=receiver.url))
    approved = ok(http.post("/orders", json=order_body(org.member_email)))["order"]["id"]
    rejected = ok(http.post("/orders", json=order_body(org.member_email)))["order"]["id"]
    api.approve_order(approved)
    api.reject_order(rejected)
    wait_for(lambda: receiver.events("ORDERS.APPROVED") and receiver.events("ORDERS.CANCELED"),
             settings=settings, engine=engine)
    assert [e["payload"]["resource"] for e in receiver.events("ORDERS.APPROVED")] == [
        {"id": approved, "type": "orders"}]
    assert [e["payload"]["resource"] for e in receiver.events("ORDERS.CANCELED")] == [
        {"id": rejected, "type": "orders"}]
    assert {"ORDERS.APPROVED", "ORDERS.CANCELED"} <= set(api.list_webhook_events(
        api.list_webhooks().webhooks[0].id).events)


def test_order_canceled_event_when_its_last_reward_is_canceled(org, api, http, receiver, engine, fast):
    settings = fast()
    settle(engine, settings)
    api.create_webhook(CreateWebhookRequest(url=receiver.url))
    order = ok(http.post("/orders", json=many_rewards_body(failing(org.member_email), [10, 20])))["order"]
    first, second = (r["id"] for r in order["rewards"])
    wait_for(lambda: len(receiver.events("REWARDS.DELIVERY.FAILED")) == 2, settings=settings, engine=engine)
    api.cancel_reward(first)
    api.cancel_reward(second)
    wait_for(lambda: receiver.events("ORDERS.CANCELED") and len(receiver.events("REWARDS.CANCELED")) == 2,
             settings=settings, engine=engine)
    assert [e["payload"]["resource"]["id"] for e in receiver.events("ORDERS.CANCELED")] == [order["id"]]
