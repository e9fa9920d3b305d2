"""Webhooks: management through the official client, signed deliveries to a real HTTP receiver."""

import concurrent.futures
import hashlib
import hmac
import json
import threading
import time

import pytest
from tremendous import CreateWebhookRequest, SimulateWebhookRequest
from tremendous.exceptions import NotFoundException, UnprocessableEntityException

from tests.conftest import order_body
from tests.delivery.conftest import wait_for
from tests.factories import error, ok
from tests.webhooks.kit import settle


def test_manage_webhook_with_the_client(api, other_org, receiver):
    hook = api.create_webhook(CreateWebhookRequest(url=receiver.url)).webhook
    assert hook.url == receiver.url and len(hook.private_key) == 64
    replaced = api.create_webhook(CreateWebhookRequest(url=receiver.url + "/v2")).webhook
    assert replaced.id == hook.id and replaced.private_key == hook.private_key
    assert [w.id for w in api.list_webhooks().webhooks] == [hook.id]
    assert api.get_webhook(hook.id).webhook.url == receiver.url + "/v2"
    assert "ORDERS.CREATED" in api.list_webhook_events(hook.id).events
    with pytest.raises(NotFoundException):
        other_org.api().get_webhook(hook.id)
    with pytest.raises(UnprocessableEntityException):
        api.simulate_webhook(hook.id, SimulateWebhookRequest(event="NOT.AN.EVENT"))
    api.delete_webhook(hook.id)
    assert api.list_webhooks().webhooks == []
    with pytest.raises(NotFoundException):
        api.get_webhook(hook.id)


def test_concurrent_creates_make_one_webhook(org, receiver):
    """One webhook per organization, also when several POST /webhooks race (on PostgreSQL two
    inserts met the unique constraint: 500)."""
    barrier = threading.Barrier(8)

    def create(i: int) -> dict:
        with org.http() as http:
            barrier.wait()
            return ok(http.post("/webhooks", json={"url": f"{receiver.url}/{i}"}))["webhook"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        created = list(pool.map(create, range(8)))
    assert len({hook["id"] for hook in created}) == 1 and len({hook["private_key"] for hook in created}) == 1
    with org.http() as http:
        (hook,) = ok(http.get("/webhooks"))["webhooks"]
    assert hook["id"] == created[0]["id"] and hook["url"] in {f"{receiver.url}/{i}" for i in range(8)}


@pytest.mark.parametrize("body", [{}, {"event": 1}, {"event": None}, "not json"])
def test_simulate_with_a_bad_body_is_422(http, receiver, body):
    # simulate_webhook's client decodes the error body of 422, not of 400 (API.md §1).
    hook = ok(http.post("/webhooks", json={"url": receiver.url}))["webhook"]
    sent = (http.post(f"/webhooks/{hook['id']}/simulate", content=body, headers={"Content-Type": "application/json"})
            if isinstance(body, str) else http.post(f"/webhooks/{hook['id']}/simulate", json=body))
    error(sent, 422)
    assert ok(http.get(f"/webhooks/{hook['id']}/deliveries"))["total_count"] == 0
    assert http.delete(f"/webhooks/{hook['id']}").status_code == 204


def test_an_event_in_flight_when_its_webhook_is_deleted_is_not_retried_at_the_next_one(api, receiver, engine, fast):
    """The event's attempt is under way (the receiver has not answered) when its webhook is
    deleted and another created; the attempt then fails. Its retry must not reach the new
    webhook: the event happened before that webhook existed."""
    settings = fast()
    settle(engine, settings)
    old = api.create_webhook(CreateWebhookRequest(url=receiver.url + "/old")).webhook
    replaced = []

    def replace_while_answering(path: str) -> None:
        if path.endswith("/old") and not replaced:
            api.delete_webhook(old.id)
            replaced.append(api.create_webhook(CreateWebhookRequest(url=receiver.url + "/new")).webhook)

    receiver.on_request = replace_while_answering
    receiver.statuses = [500]  # the in-flight attempt fails: the job is due again
    api.simulate_webhook(old.id, SimulateWebhookRequest(event="ORDERS.FAILED"))
    wait_for(lambda: replaced, settings=settings, engine=engine)
    for _ in range(3):  # past its retry delay: the quick settings' retries are due within a second
        settle(engine, settings)
        time.sleep(0.5)
    api.simulate_webhook(replaced[0].id, SimulateWebhookRequest(event="ORDERS.CANCELED"))
    wait_for(lambda: receiver.events("ORDERS.CANCELED"), settings=settings, engine=engine)
    settle(engine, settings)
    assert [(path.rsplit("/", 1)[1], json.loads(body)["event"]) for path, (_, body)
            in zip(receiver.paths, receiver.requests, strict=True)] == [("old", "ORDERS.FAILED"),
                                                                       ("new", "ORDERS.CANCELED")]


def test_webhook_url_must_be_http(http):
    response = http.post("/webhooks", json={"url": "ftp://example.com/x"})
    assert response.status_code == 400
    assert response.json()["errors"]["payload"] == {"url": ["must be an http(s) URL"]}


def test_order_event_is_signed_and_retried(org, api, http, receiver, engine, fast):
    settings = fast()
    settle(engine, settings)
    hook = api.create_webhook(CreateWebhookRequest(url=receiver.url)).webhook
    receiver.statuses = [500]  # the first attempt fails, the retry succeeds
    order = http.post("/orders", json=order_body(org.member_email)).json()["order"]
    wait_for(lambda: len(receiver.events("ORDERS.CREATED")) >= 2, settings=settings, engine=engine)

    (headers, raw), (headers2, raw2) = [(h, b) for h, b in receiver.requests
                                        if json.loads(b)["event"] == "ORDERS.CREATED"][:2]
    body = json.loads(raw)
    assert body["payload"]["resource"] == {"id": order["id"], "type": "orders"}
    assert raw2 == raw, "a retry sends the same body, so receivers can dedupe on uuid"
    expected = "sha256=" + hmac.new(hook.private_key.encode(), raw, hashlib.sha256).hexdigest()
    assert headers["tremendous-webhook-signature"] == expected
    assert headers["content-type"] == "application/json"


def test_simulate_and_no_webhook_no_event(org, api, http, receiver, engine, fast):
    settle(engine, fast())
    http.post("/orders", json=order_body(org.member_email))  # before any webhook: no event queued
    hook = api.create_webhook(CreateWebhookRequest(url=receiver.url)).webhook
    assert api.simulate_webhook(hook.id, SimulateWebhookRequest(event="REWARDS.DELIVERY.SUCCEEDED")) == "OK"
    wait_for(lambda: receiver.events("REWARDS.DELIVERY.SUCCEEDED"), settings=fast(), engine=engine)
    assert receiver.events("ORDERS.CREATED") == []


def test_simulate_takes_every_event_of_tremendous_list(api, receiver, engine, fast):
    # API.md §2.4: simulate takes "an event name from §8", also those this service never emits.
    settle(engine, fast())
    hook = api.create_webhook(CreateWebhookRequest(url=receiver.url)).webhook
    for event in ("CAMPAIGNS.CREATED", "PRODUCTS.ADDED", "CONNECTED_ORGANIZATIONS.STATUS.APPROVED"):
        assert api.simulate_webhook(hook.id, SimulateWebhookRequest(event=event)) == "OK"
    wait_for(lambda: len(receiver.requests) >= 3, settings=fast(), engine=engine)
    assert receiver.events("CAMPAIGNS.CREATED")[0]["payload"]["resource"]["type"] == "campaigns"
    assert receiver.events("PRODUCTS.ADDED")[0]["payload"]["resource"]["type"] == "products"
    assert receiver.events("CONNECTED_ORGANIZATIONS.STATUS.APPROVED")[0]["payload"]["resource"]["type"] == \
        "connected_organizations"
    # What it lists as sent stays what it sends.
    assert "CAMPAIGNS.CREATED" not in api.list_webhook_events(hook.id).events


def _tagged(address: str, tag: str) -> str:
    local, _, domain = address.partition("@")
    return f"{local}+{tag}@{domain}"


def test_reward_lifecycle_events(org, api, http, receiver, engine, fast):
    settle(engine, fast())
    api.create_webhook(CreateWebhookRequest(url=receiver.url))
    delivered = http.post("/orders", json=order_body(org.member_email)).json()["order"]["rewards"][0]
    failed = http.post("/orders", json=order_body(_tagged(org.member_email, "fail"))).json()["order"]["rewards"][0]
    settings = fast()
    wait_for(lambda: receiver.events("REWARDS.DELIVERY.SUCCEEDED") and receiver.events("REWARDS.DELIVERY.FAILED"),
             settings=settings, engine=engine)
    assert [e["payload"]["resource"]["id"] for e in receiver.events("REWARDS.DELIVERY.SUCCEEDED")] == [delivered["id"]]
    assert [e["payload"]["resource"]["id"] for e in receiver.events("REWARDS.DELIVERY.FAILED")] == [failed["id"]]

    api.cancel_reward(failed["id"])
    wait_for(lambda: receiver.events("REWARDS.CANCELED"), settings=settings, engine=engine)
    assert receiver.events("REWARDS.CANCELED")[0]["payload"]["resource"] == {"id": failed["id"], "type": "rewards"}


def test_a_deleted_webhooks_queued_events_are_dropped_not_sent_to_its_successor(api, receiver, engine, fast):
    """docs/webhooks.md: "a deleted webhook drops them". Events queued for a webhook that is
    then deleted never reach a webhook created after it (a new URL, a new key), even when the
    old ones were still waiting for an attempt."""
    settings = fast()
    settle(engine, settings)
    old = api.create_webhook(CreateWebhookRequest(url=receiver.url + "/old")).webhook
    api.simulate_webhook(old.id, SimulateWebhookRequest(event="ORDERS.FAILED"))  # queued, not sent yet
    api.delete_webhook(old.id)
    new = api.create_webhook(CreateWebhookRequest(url=receiver.url + "/new")).webhook
    assert new.id != old.id
    api.simulate_webhook(new.id, SimulateWebhookRequest(event="ORDERS.CANCELED"))
    wait_for(lambda: receiver.events("ORDERS.CANCELED"), settings=settings, engine=engine)
    settle(engine, settings)
    assert [json.loads(body)["event"] for _, body in receiver.requests] == ["ORDERS.CANCELED"]
