"""The delivery log: every attempt recorded, paginated, scoped to the organization; resend."""

import json

import httpx
from sqlalchemy import select

from largesse import auth, db, paging
from largesse.delivery.models import jobs
from tests.delivery.conftest import wait_for
from tests.webhooks.kit import settle


def _job_status(engine, org_id: str) -> list[str]:
    with db.read(engine) as conn:
        return conn.execute(select(jobs.c.status).where(jobs.c.organization_id == org_id,
                                                        jobs.c.kind == "deliver_webhook")
                            .order_by(jobs.c.id)).scalars().all()


def test_failed_attempts_are_logged_and_the_event_resent(org, other_org, http, receiver, engine, fast,
                                                         monkeypatch):
    settings = fast()
    settle(engine, settings)
    receiver.default = 500  # every attempt fails, until the receiver is fixed below
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    base = f"/webhooks/{hook['id']}/deliveries"
    assert http.get(base).json() == {"deliveries": [], "total_count": 0}
    http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "REWARDS.CANCELED"})

    wait_for(lambda: _job_status(engine, org.id) == ["dead"], settings=settings, engine=engine, timeout=60)
    log = http.get(base, params={"limit": 500}).json()
    assert log["total_count"] == 10 == len(receiver.requests)  # MAX_ATTEMPTS
    newest, oldest = log["deliveries"][0], log["deliveries"][-1]
    uuid = json.loads(receiver.requests[0][1])["uuid"]
    assert oldest["attempt"] == 1 and newest["attempt"] == 10
    assert {d["event"] for d in log["deliveries"]} == {"REWARDS.CANCELED"}
    assert {d["event_uuid"] for d in log["deliveries"]} == {uuid}
    assert all(d["status"] == "FAILED" and d["response_status"] == 500 for d in log["deliveries"])
    assert newest["will_retry"] is False and oldest["will_retry"] is True
    assert newest["error"] == "webhook endpoint answered 500" and newest["url"] == receiver.url
    assert isinstance(newest["duration_ms"], int) and newest["started_at"] <= newest["finished_at"]

    # Pages and filters.
    page = http.get(base, params={"limit": 3, "offset": 8}).json()
    assert page["total_count"] == 10 and [d["attempt"] for d in page["deliveries"]] == [2, 1]
    assert http.get(base, params={"status": "SUCCEEDED"}).json()["total_count"] == 0
    assert http.get(base, params={"event_uuid": uuid, "limit": 1}).json()["total_count"] == 10
    assert http.get(f"{base}/{newest['id']}").json()["delivery"] == newest
    # total_count as every list counts it (paging.COUNT_HORIZON, here 3): a lower bound while more
    # than the horizon follows the offset, exact near the end and past it.
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)
    assert http.get(base, params={"limit": 2}).json()["total_count"] == 4
    assert http.get(base, params={"limit": 2, "offset": 7}).json()["total_count"] == 10
    assert http.get(base, params={"limit": 2, "offset": 50}).json() == {"deliveries": [], "total_count": 10}
    assert http.get(base, params={"event_uuid": uuid, "status": "FAILED", "limit": 3}).json()["total_count"] == 4
    monkeypatch.undo()

    # Another organization sees none of it.
    with other_org.http() as other:
        assert other.get(base).status_code == 404
        assert other.get(f"{base}/{newest['id']}").status_code == 404
        assert other.post(f"{base}/{newest['id']}/resend").status_code == 404
    # A read-only key reads the log but cannot resend.
    with db.write(engine) as conn:
        ro_key = auth.issue_key(conn, organization_id=org.id, permission="read_only")[1]
    with httpx.Client(base_url=f"{org.base_url}/api/v2", headers={"Authorization": f"Bearer {ro_key}"}) as ro:
        assert ro.get(base).json()["total_count"] == 10
        assert ro.post(f"{base}/{newest['id']}/resend").status_code == 403

    # Resend once the receiver works: the same event (same uuid) arrives, the log says so.
    receiver.default = 200
    resent = http.post(f"{base}/{oldest['id']}/resend")
    assert resent.status_code == 200 and resent.json() == {"status": "QUEUED", "event": "REWARDS.CANCELED",
                                                            "uuid": uuid}
    assert http.post(f"{base}/{newest['id']}/resend").status_code == 409  # already queued
    wait_for(lambda: len(receiver.requests) == 11, settings=settings, engine=engine)
    assert json.loads(receiver.requests[-1][1])["uuid"] == uuid
    assert receiver.requests[-1][0]["webhook-id"] == uuid
    succeeded = http.get(base, params={"status": "SUCCEEDED"}).json()
    assert succeeded["total_count"] == 1 and succeeded["deliveries"][0]["response_status"] == 200
    again = http.post(f"{base}/{oldest['id']}/resend")
    assert again.status_code == 422 and "delivered" in again.json()["errors"]["message"]
    assert http.post(f"{base}/{succeeded['deliveries'][0]['id']}/resend").status_code == 422


def test_resend_while_retrying_is_refused(org, http, receiver, engine, fast):
    settings = fast(job_retry_base_seconds=600, job_retry_max_seconds=600)
    settle(engine, settings)
    receiver.default = 503
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "ORDERS.CREATED"})
    wait_for(lambda: receiver.requests, settings=settings, engine=engine)
    delivery = http.get(f"/webhooks/{hook['id']}/deliveries").json()["deliveries"][0]
    assert delivery["will_retry"] is True
    refused = http.post(f"/webhooks/{hook['id']}/deliveries/{delivery['id']}/resend")
    assert refused.status_code == 409 and "queued" in refused.json()["errors"]["message"]
    # Deleting the webhook deletes its log; its ids are then unknown.
    assert http.delete(f"/webhooks/{hook['id']}").status_code == 204
    assert http.get(f"/webhooks/{hook['id']}/deliveries").status_code == 404


def test_delivery_routes_never_500(http, receiver):
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    base = f"/webhooks/{hook['id']}/deliveries"
    for params in ({"limit": "0"}, {"limit": "x"}, {"offset": "-1"}, {"offset": "99999999999999"},
                   {"status": "NOPE"}, {"event_uuid": "a" * 100}, {"event_uuid": "\x00"}, {"limit": "1_0"}):
        response = http.get(base, params=params)
        assert response.status_code == 400, (params, response.text)
    assert http.get(base, params={"limit": "99999999999999"}).status_code == 200  # reads as the maximum
    for path in (f"{base}/NOTANID", f"{base}/" + "A" * 300, "/webhooks/NOPE/deliveries", f"{base}/%00"):
        response = http.get(path)
        assert response.status_code in (400, 404), (path, response.text)
        assert http.post(path + "/resend").status_code in (400, 404, 405)


def test_log_keeps_thirty_days(http, receiver, engine, fast):
    from datetime import timedelta

    from largesse.timeutil import utcnow
    from largesse.webhooks.models import webhook_deliveries

    settings = fast()
    settle(engine, settings)
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    org_id = None
    with db.read(engine) as conn:
        from largesse.webhooks.models import webhooks

        org_id = conn.execute(select(webhooks.c.organization_id).where(webhooks.c.id == hook["id"])).scalar_one()
    old = utcnow() - timedelta(days=31)
    with db.write(engine) as conn:
        conn.execute(webhook_deliveries.insert().values(
            id="OLDDELIVERY0001" + hook["id"][:5], organization_id=org_id, webhook_id=hook["id"], job_id=None,
            event="ORDERS.CREATED", event_uuid="old", url=receiver.url, attempt=1, status="FAILED",
            will_retry=False, response_status=500, duration_ms=1, error="old", started_at=old, finished_at=old))
    assert http.get(f"/webhooks/{hook['id']}/deliveries").json()["total_count"] == 1
    http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "ORDERS.CREATED"})
    wait_for(lambda: receiver.requests, settings=settings, engine=engine)
    log = http.get(f"/webhooks/{hook['id']}/deliveries").json()
    assert log["total_count"] == 1 and log["deliveries"][0]["event_uuid"] != "old"


def test_an_attempt_in_flight_when_its_webhook_is_deleted_leaves_no_log(org, http, receiver, engine, fast):
    """Deleting the webhook deletes its log (URL and all): an attempt under way at that moment
    wrote its row afterwards, kept for 30 days though no API could reach it."""
    from largesse.webhooks.models import webhook_deliveries

    settings = fast()
    settle(engine, settings)
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    deleted = []

    def delete_while_the_sender_waits(path):
        with org.http() as client:
            deleted.append(client.delete(f"/webhooks/{hook['id']}").status_code)

    receiver.on_request = delete_while_the_sender_waits
    assert http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "ORDERS.CREATED"}).status_code == 200
    wait_for(lambda: deleted and _job_status(engine, org.id) == ["done"], settings=settings, engine=engine)
    assert deleted == [204] and len(receiver.requests) == 1
    with db.read(engine) as conn:
        assert conn.execute(select(webhook_deliveries.c.id).where(
            webhook_deliveries.c.webhook_id == hook["id"])).all() == []
