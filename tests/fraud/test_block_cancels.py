"""Blocking a fraud review cancels the reward as the client's cancel does (delivery.service.cancel_in):
one refund, its queued deliveries dropped, its order CANCELED once every reward of it is, and
REWARDS.CANCELED / ORDERS.CANCELED sent."""

from __future__ import annotations

from sqlalchemy import select
from tremendous import CreateWebhookRequest, FraudRuleRequest, FraudRuleRequestConfig, ReviewIp

from largesse import db
from largesse.delivery.models import jobs
from largesse.redemption import tokens
from tests.conftest import order_body
from tests.delivery.conftest import fast, wait_for  # noqa: F401 - fast: the quick worker's settings
from tests.factories import available_cents, ok
from tests.fraud.conftest import events_for, redeem, refund_count
from tests.redemption.conftest import GIFT_CARD, fake_ip
from tests.webhooks.conftest import receiver  # noqa: F401 - the webhook receiver fixture
from tests.webhooks.kit import settle


def flag_redemptions_from(api, ip: str) -> None:
    api.fraud_rule("review_ip", FraudRuleRequest(config=FraudRuleRequestConfig(ReviewIp(ips=[ip]))))


def link_order(http, email: str, denominations) -> dict:
    rewards = [order_body(email, denomination=d, products=(GIFT_CARD,), method="LINK")["reward"]
               for d in denominations]
    return ok(http.post("/orders", json={"payment": {"funding_source_id": "balance"}, "rewards": rewards}))["order"]


def order_status(http, order_id: str) -> str:
    return ok(http.get(f"/orders/{order_id}"))["order"]["status"]


def queued_deliveries(engine, reward_id: str) -> list:
    with db.read(engine) as conn:
        return conn.execute(select(jobs.c.status, jobs.c.last_error).where(
            jobs.c.reward_id == reward_id, jobs.c.kind == "deliver_reward")).all()


def test_blocking_an_orders_only_reward_cancels_the_order(org, api, http, engine, receiver, fast, cli):  # noqa: F811
    settings = fast()
    settle(engine, settings)
    api.create_webhook(CreateWebhookRequest(url=receiver.url))
    ip = fake_ip()
    flag_redemptions_from(api, ip)
    order = link_order(http, org.member_email, [40])
    reward = order["rewards"][0]
    before = available_cents(http)
    redeem(reward["delivery"]["link"], ip=ip)
    assert order_status(http, order["id"]) == "EXECUTED"

    assert api.block_fraud_review(reward["id"]).fraud_review.status == "blocked"
    assert order_status(http, order["id"]) == "CANCELED"
    got = ok(http.get(f"/rewards/{reward['id']}"))["reward"]
    assert got["redemption"]["status"] == "CANCELED" and got["redemption"]["canceled_at"]
    assert available_cents(http) == before + 4000 and refund_count(engine, reward["id"]) == 1
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["payment"]["refund"]["total"] == 40

    assert api.block_fraud_review(reward["id"]).fraud_review.status == "blocked"  # again: nothing more
    assert available_cents(http) == before + 4000 and refund_count(engine, reward["id"]) == 1
    assert events_for(engine, org.id, order["id"]).count("ORDERS.CANCELED") == 1
    assert events_for(engine, org.id, reward["id"]).count("REWARDS.CANCELED") == 1
    wait_for(lambda: receiver.events("ORDERS.CANCELED") and receiver.events("REWARDS.CANCELED"),
             settings=settings, engine=engine)
    assert [e["payload"]["resource"] for e in receiver.events("ORDERS.CANCELED")] == [
        {"id": order["id"], "type": "orders"}]
    assert [e["payload"]["resource"]["id"] for e in receiver.events("REWARDS.CANCELED")] == [reward["id"]]
    cli("ledger", "verify")


def test_the_order_is_canceled_only_with_its_last_reward(org, api, http, engine, webhook):
    ip = fake_ip()
    flag_redemptions_from(api, ip)
    order = link_order(http, org.member_email, [10, 20])
    first, second = order["rewards"]
    before = available_cents(http)
    for reward in (first, second):
        redeem(reward["delivery"]["link"], ip=ip)

    api.block_fraud_review(first["id"])
    assert order_status(http, order["id"]) == "EXECUTED"
    assert "ORDERS.CANCELED" not in events_for(engine, org.id, order["id"])
    api.block_fraud_review(second["id"])
    assert order_status(http, order["id"]) == "CANCELED"
    assert events_for(engine, org.id, order["id"]).count("ORDERS.CANCELED") == 1
    assert available_cents(http) == before + 3000
    assert (refund_count(engine, first["id"]), refund_count(engine, second["id"])) == (1, 1)


def test_blocking_drops_the_rewards_queued_delivery(org, api, http, engine, fast, cli):  # noqa: F811
    """An EMAIL reward whose email is still queued, redeemed through a link (issued here as the
    email composer issues one): the block drops the queued email, which then never goes out."""
    ip = fake_ip()
    flag_redemptions_from(api, ip)
    order = ok(http.post("/orders", json=order_body(org.member_email, products=(GIFT_CARD,))))["order"]
    reward_id = order["rewards"][0]["id"]
    assert [j.status for j in queued_deliveries(engine, reward_id)] == ["queued"]
    with db.write(engine) as conn:
        link = tokens.link(org.base_url, tokens.issue(conn, reward_id))
    redeem(link, ip=ip)
    before = available_cents(http)

    api.block_fraud_review(reward_id)
    assert queued_deliveries(engine, reward_id) == [("done", "reward blocked in fraud review")]
    assert order_status(http, order["id"]) == "CANCELED"
    assert available_cents(http) == before + 2500 and refund_count(engine, reward_id) == 1
    wait_for(lambda: True, settings=fast(), engine=engine)  # a worker pass: its email is not sent
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["delivery"]["status"] == "PENDING"
    cli("ledger", "verify")
