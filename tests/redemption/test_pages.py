"""The redemption page over HTTP: choose, redeem, revisit, and every refusal."""

from __future__ import annotations

import re
import threading

from sqlalchemy import func, select, text

from largesse import db
from largesse.redemption import tokens
from largesse.redemption.models import payouts
from largesse.redemption.ratelimit import RateLimits
from largesse.redemption.security import style_hash
from largesse.redemption.style import contrast_ratio, text_color_for
from tests.factories import make_campaign, make_field
from tests.redemption.conftest import CHARITY, GIFT_CARD, csrf_of, link_reward, page_client


def _payout_count(engine, reward_id: str) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(func.count()).select_from(payouts).where(payouts.c.reward_id == reward_id)
                            ).scalar_one()


def test_choose_redeem_and_revisit(org, api, engine):
    reward_id, link = link_reward(org)
    with page_client() as client:
        page = client.get(link)
        assert page.status_code == 200
        assert 'lang="en"' in page.text and "<fieldset" in page.text and "<legend>" in page.text
        assert "Northwind Books" in page.text and "$25.00" in page.text and "Acme" in page.text
        headers = page.headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "unsafe-inline" not in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
        done = client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": GIFT_CARD})
        assert done.status_code == 303 and done.headers["location"].startswith("/redeem/")
        payout = client.get(link)
        assert payout.status_code == 200 and "TEST-" in payout.text and "has no value" in payout.text
        assert "How to use it" in payout.text and 'type="radio"' not in payout.text
        again = client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": CHARITY})
        assert again.status_code == 409 and "Already redeemed" in again.text
        assert client.get(link).text.count("TEST-") == payout.text.count("TEST-")
    assert _payout_count(engine, reward_id) == 1
    with org.http() as http:
        wire = http.get(f"/rewards/{reward_id}").json()["reward"]
    assert wire["redemption"]["status"] == "REDEEMED" and wire["redemption"]["redeemed_at"].endswith("Z")
    assert wire["redemption"]["product_id"] == GIFT_CARD
    assert wire["delivery"] == {"method": "LINK", "status": "SUCCEEDED"}
    reward = api.get_reward(reward_id).reward  # the official client still deserializes it
    assert reward.id == reward_id and reward.value.denomination == 25


def test_campaign_style_is_hashed_into_the_csp(org):
    with org.http() as http:
        campaign = http.post("/campaigns", json={
            "name": "Thanks", "description": None, "products": [GIFT_CARD],
            "webpage_style": {"headline": "Thank you <team>!", "background_color": "#ffcc00",
                              "logo_background_color": "#222222"}})
        assert campaign.status_code == 200, campaign.text
    _, link = link_reward(org, products=None, campaign_id=campaign.json()["campaign"]["id"])
    with page_client() as client:
        page = client.get(link)
    css = re.search(r"<style>(.*?)</style>", page.text).group(1)
    assert "--page-bg:#ffcc00;--page-fg:#14171f" in css and "--brand-fg:#ffffff" in css
    assert style_hash(css) in page.headers["content-security-policy"]
    assert "Thank you &lt;team&gt;!" in page.text  # autoescaped


def test_page_copy_is_the_emails(org):
    """The page says what the email says: the order's message before the campaign's, and the
    campaign's placeholders filled with the reward's custom field values (an unset one empty)."""
    with org.http() as http:
        dept = make_field(http, options=("Sales", "R&D"))
        team = make_field(http, options=("Blue", "Red"))
        dept_, team_ = "{{ " + dept["label"] + " }}", "{{ " + team["label"].upper() + " }}"
        campaign = make_campaign(http, products=(GIFT_CARD,), webpage_style={
            "headline": f"Hello {dept_}{team_}!", "message": f"Campaign copy for {dept_}"})
    order_message = f"Dear {dept_} colleague,\n\nthank you & enjoy."
    _, link = link_reward(org, products=None, campaign_id=campaign["id"],
                          custom_fields=[{"id": dept["id"], "value": "R&D"}],
                          delivery={"method": "LINK", "meta": {"message": order_message}})
    with page_client() as client:
        page = client.get(link)
    assert page.status_code == 200
    assert re.search(r'<h1 id="headline" dir="auto">Hello R&amp;D!</h1>', page.text)
    assert '<p class="message" dir="auto">Dear R&amp;D colleague,</p>' in page.text
    assert '<p class="message" dir="auto">thank you &amp; enjoy.</p>' in page.text
    assert "Campaign copy" not in page.text and "{{" not in page.text


def test_csrf_token_works_across_server_processes(org, make_server, engine):
    """Another server (its own app state, same database) accepts the first one's form."""
    reward_id, link = link_reward(org, products=(GIFT_CARD,))
    other = make_server().url + link[link.index("/redeem/"):]
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        assert client.post(other, data={"csrf_token": token, "product_id": GIFT_CARD}).status_code == 303
    assert _payout_count(engine, reward_id) == 1


def test_replaced_link_says_so(org, engine):
    reward_id, old = link_reward(org)
    with db.write(engine) as conn:
        new = old[:old.index("/redeem/")] + "/redeem/" + tokens.issue(conn, reward_id, revoke_others=True)
    with page_client() as client:
        page = client.get(old)
        assert page.status_code == 410 and "This link was replaced" in page.text
        assert client.get(new).status_code == 200


def test_charity_records_a_donation(org):
    _, link = link_reward(org, products=(CHARITY,))
    with page_client() as client:
        page = client.get(link)
        assert 'value="PCHOCEANTR01US" required' in page.text and "checked" in page.text  # single option preselected
        client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": CHARITY})
        shown = client.get(link).text
    assert "Donation of $25.00 to Open Ocean Trust made on your behalf; confirmation DON-TEST-" in shown
    # Said as a donation made: not "Your Open Ocean Trust", no "test code", no "confirm the donation" to do.
    assert '<h1 id="headline">Your donation to Open Ocean Trust</h1>' in shown
    assert "nothing was donated" in shown and "test code" not in shown and "confirm the donation" not in shown


def test_double_redemption_race_issues_one_payout(org, engine):
    reward_id, link = link_reward(org)
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        cookies = dict(client.cookies)
    barrier, statuses = threading.Barrier(2), []

    def attempt(product_id: str) -> None:
        with page_client() as racer:
            racer.cookies.update(cookies)
            barrier.wait()
            statuses.append(racer.post(link, data={"csrf_token": token, "product_id": product_id}).status_code)

    threads = [threading.Thread(target=attempt, args=(p,)) for p in (GIFT_CARD, CHARITY)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [303, 409]
    assert _payout_count(engine, reward_id) == 1


def test_csrf_missing_or_wrong_is_refused(org, engine):
    reward_id, link = link_reward(org)
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        assert client.post(link, data={"product_id": GIFT_CARD}).status_code == 403
        assert client.post(link, data={"csrf_token": "0" * 64, "product_id": GIFT_CARD}).status_code == 403
        for other_letters in ("é", "\u202e" + "0" * 63):  # compare_digest raised on non-ASCII text: 500
            assert client.post(link, data={"csrf_token": other_letters, "product_id": GIFT_CARD}).status_code == 403
        cross = client.post(link, data={"csrf_token": token, "product_id": GIFT_CARD},
                            headers={"Origin": "https://evil.example"})
        assert cross.status_code == 403
    with page_client() as stranger:  # a valid token without the matching cookie
        assert stranger.post(link, data={"csrf_token": token, "product_id": GIFT_CARD}).status_code == 403
    assert _payout_count(engine, reward_id) == 0


def test_invalid_choice_rerenders_the_form(org):
    _, link = link_reward(org)
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        wrong = client.post(link, data={"csrf_token": token, "product_id": "PVCMERIDUS01US"})
        assert wrong.status_code == 400 and 'role="alert"' in wrong.text and 'type="radio"' in wrong.text


def test_unknown_canceled_and_expired_links(org, engine, server):
    with page_client() as client:
        unknown = client.get(f"{server.url}/redeem/not-a-real-token")
        assert unknown.status_code == 404 and "Link not found" in unknown.text
        assert unknown.headers["referrer-policy"] == "no-referrer"
        canceled_id, canceled = link_reward(org)
        expired_id, expired = link_reward(org)
        token = csrf_of(client.get(canceled).text)
        with db.write(engine) as conn:
            conn.execute(text("UPDATE rewards SET status = 'CANCELED' WHERE id = :id AND status = 'ACTIVE'"),
                         {"id": canceled_id})
            conn.execute(text("UPDATE rewards SET expires_at = :past WHERE id = :id"),
                         {"id": expired_id, "past": "2020-01-01 00:00:00"})
        page = client.get(canceled)
        assert page.status_code == 410 and "canceled" in page.text
        assert client.post(canceled, data={"csrf_token": token, "product_id": GIFT_CARD}).status_code == 410
        page = client.get(expired)
        assert page.status_code == 410 and "expired" in page.text
    assert _payout_count(engine, canceled_id) == 0
    with db.write(engine) as conn:  # CANCELED without a refund is a finding of `ledger verify`
        conn.execute(text("UPDATE rewards SET status = 'ACTIVE' WHERE id = :id"), {"id": canceled_id})


def test_rate_limits_per_ip_and_per_token(org, make_server):
    extra = make_server()
    extra.app.state.redemption_limits = RateLimits(per_ip=5, per_token=100, posts_per_token=2)
    _, link = link_reward(org)
    link = extra.url + link[link.index("/redeem/"):]
    with page_client() as client:
        assert [client.get(link).status_code for _ in range(5)] == [200] * 5
        limited = client.get(link)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert "Too many attempts" in limited.text
    statuses = []
    for _ in range(3):  # each from a new address: the per-token POST limit still applies
        with page_client() as client:
            statuses.append(client.post(link, data={"csrf_token": "x", "product_id": GIFT_CARD}).status_code)
    assert statuses == [403, 403, 429]


def test_sandbox_products_are_unavailable_in_production(prod_org):
    _, link = link_reward(prod_org, products=(GIFT_CARD,))  # a product of the shipped (sandbox) catalog
    with page_client() as client:
        page = client.get(link)
    assert page.status_code == 200 and "disabled" in page.text and "Not available at the moment" in page.text
    assert "Confirm my choice" not in page.text


def test_a_server_serves_only_its_own_environments_links(org, prod_org, server, engine):
    """Sandbox and production servers may share a database: each answers the other's reward
    links as unknown, so a production reward is never redeemed for a sandbox test code."""
    from largesse.orders.models import rewards

    prod_reward, prod_link = link_reward(prod_org, products=(GIFT_CARD,))
    _, sandbox_link = link_reward(org, products=(GIFT_CARD,))
    production_url = prod_link[:prod_link.index("/redeem/")]
    assert not production_url.startswith(server.url)
    with page_client() as client:
        on_sandbox = server.url + prod_link[prod_link.index("/redeem/"):]
        page = client.get(on_sandbox)
        assert page.status_code == 404 and "Confirm my choice" not in page.text
        refused = client.post(on_sandbox, data={"csrf_token": "x" * 64, "product_id": GIFT_CARD})
        assert refused.status_code in (403, 404)
        on_production = production_url + sandbox_link[sandbox_link.index("/redeem/"):]
        assert client.get(on_production).status_code == 404
        assert client.get(sandbox_link).status_code == 200  # each on its own server
    with db.read(engine) as conn:
        assert conn.execute(select(rewards.c.status).where(rewards.c.id == prod_reward)).scalar_one() == "ACTIVE"


def test_text_colour_meets_wcag_aa():
    digits = "0123456789abcdef"
    for background in (f"#{r}{g}{b}" for r in digits for g in digits for b in digits):
        assert contrast_ratio(background, text_color_for(background)) >= 4.5, background


def test_paths_that_are_no_link_get_the_human_not_found_page(org, server):
    _, link = link_reward(org, products=(GIFT_CARD,))
    token = link[link.index("/redeem/") + len("/redeem/"):]
    bad = ["/redeem/", "/redeem", "/redeem/abc/def", f"/redeem/{token}/", "/redeem/%00", "/redeem/%FF",
           "/redeem/a%20b", f"/redeem/{token}%00", "/redeem/" + "A" * 5000, "/redeem/%E2%80%AE", f"/redeem//{token}"]
    with page_client() as client:
        for path in bad:
            page = client.get(server.url + path)
            assert page.status_code == 404, (path, page.status_code)
            assert page.headers["content-type"].startswith("text/html"), (path, page.headers)
            assert "Link not found" in page.text, path
            assert "errors" not in page.text and "\x00" not in page.text
            assert token not in page.text and "abc" not in page.text and "AAAA" not in page.text
            assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        other_method = client.put(server.url + f"/redeem/{token}")
        assert other_method.status_code == 405 and "Link not found" in other_method.text
        assert client.get(link).status_code == 200  # the real link still works


def test_a_prepaid_card_shows_what_its_instructions_name(org):
    """"View the card number and its security code": the page showed a card number and a 4-digit
    "PIN", which no virtual prepaid card has."""
    _, link = link_reward(org, products=("PVCMERIDUS01US",))
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        assert client.post(link, data={"csrf_token": token, "product_id": "PVCMERIDUS01US"}).status_code == 303
        page = client.get(link).text
    assert "card number and its security code" in page
    assert re.search(r'id="pin-label">Security code</span>', page)
    assert re.search(r'id="pin-value"[^>]*>\d{3}</code>', page)
