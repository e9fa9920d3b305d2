"""Every page of one link speaks for the reward's sender, and says what the payout shows."""

from __future__ import annotations

import re

from tests.redemption.conftest import CHARITY, GIFT_CARD, csrf_of, link_reward, page_client

BRAND = re.compile(r'<span class="brand-name"><bdi>([^<]*)</bdi></span>')


def test_already_redeemed_and_try_again_pages_carry_the_senders_brand(org):
    _, link = link_reward(org)
    with page_client() as first, page_client() as second:
        page = first.get(link)
        other_tab = second.get(link)
        assert BRAND.search(page.text).group(1) == "Acme"
        refused = first.post(link, data={"csrf_token": "0" * 64, "product_id": GIFT_CARD})
        assert refused.status_code == 403 and "Please try again" in refused.text
        assert BRAND.search(refused.text).group(1) == "Acme", refused.text
        assert first.post(link, data={"csrf_token": csrf_of(page.text), "product_id": GIFT_CARD}).status_code == 303
        again = second.post(link, data={"csrf_token": csrf_of(other_tab.text), "product_id": CHARITY})
        assert again.status_code == 409 and "Already redeemed" in again.text
        assert BRAND.search(again.text).group(1) == "Acme", again.text
        assert "Please contact <bdi>Acme</bdi>" in again.text
        assert f'href="/redeem/{link.rsplit("/", 1)[1]}"' in again.text
    # An unknown link stays unbranded: nothing is known about its sender.
    with page_client() as client:
        unknown = client.post(link + "x", data={"csrf_token": "0" * 64})
        assert unknown.status_code == 403 and BRAND.search(unknown.text).group(1) == "Rewards"


def test_a_donation_page_speaks_of_no_code(org):
    _, link = link_reward(org)
    with page_client() as client:
        page = client.get(link)
        assert client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": CHARITY}).status_code == 303
        payout = client.get(link).text
    assert "Your donation to" in payout
    assert "this code again" not in payout and "the link shows this confirmation again" in payout
    _, link = link_reward(org)
    with page_client() as client:
        page = client.get(link)
        client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": GIFT_CARD})
        assert "the link shows this code again" in client.get(link).text
