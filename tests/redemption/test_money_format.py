"""The redemption page writes a JPY reward without decimals ("¥5,000"), as its email does."""

from __future__ import annotations

from tests.factories import ok
from tests.redemption.conftest import csrf_of, page_client
from tests.yen_kit import yen_order_body, yen_org, yen_product


def test_a_yen_reward_page_has_no_decimals(engine, server):
    org = yen_org(engine, server.url)
    product = yen_product(engine)
    with org.http() as http:
        reward = ok(http.post("/orders", json=yen_order_body(org.member_email, product, method="LINK")))["order"][
            "rewards"][0]
    link = reward["delivery"]["link"]
    with page_client() as client:
        page = client.get(link)
        assert page.status_code == 200, page.text
        assert "<title>¥5,000 reward from Yen Corp" in page.text
        assert "Reward value: </span>¥5,000</p>" in page.text and "Yen Books" in page.text
        assert "5,000.00" not in page.text and "5000.00" not in page.text
        done = client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": product})
        assert done.status_code == 303, done.text
        payout = client.get(link)
        assert payout.status_code == 200 and "TEST-" in payout.text
        assert "Value: </span>¥5,000</p>" in payout.text and "5,000.00" not in payout.text
