"""An order whose every reward is canceled is CANCELED; one live reward keeps it EXECUTED."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from largesse import db
from largesse.funding.service import verify
from tests.conftest import failing
from tests.factories import many_rewards_body, ok


def test_order_is_canceled_with_its_last_reward(org, api, http, engine, deliver):
    order = ok(http.post("/orders", json=many_rewards_body(failing(org.member_email), [10, 20, 30])))["order"]
    ids = [r["id"] for r in order["rewards"]]
    deliver()
    assert {api.get_reward(i).reward.delivery.status for i in ids} == {"FAILED"}
    api.cancel_reward(ids[0])
    api.cancel_reward(ids[1])
    assert api.get_order(order["id"]).order.status == "EXECUTED"
    api.cancel_reward(ids[2])
    canceled = api.get_order(order["id"]).order
    assert canceled.status == "CANCELED" and canceled.payment.refund.total == 60
    with db.read(engine) as conn:
        assert [p for p in verify(conn) if p.organization_id == org.id] == []


def test_concurrent_cancels_of_every_reward_cancel_the_order(org, http, deliver):
    for _ in range(3):
        order = ok(http.post("/orders", json=many_rewards_body(failing(org.member_email), [5] * 6)))["order"]
        deliver()

        def cancel(reward_id):
            with org.http() as client:
                return client.post(f"/rewards/{reward_id}/cancel").status_code

        with ThreadPoolExecutor(max_workers=6) as pool:
            assert list(pool.map(cancel, [r["id"] for r in order["rewards"]])) == [200] * 6
        assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "CANCELED"
