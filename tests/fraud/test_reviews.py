"""Held redemptions: flagged by a rule on the real page, then released or blocked."""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import func, select, update
from tremendous import FraudRuleRequest, FraudRuleRequestConfig, ReviewIp
from tremendous.exceptions import NotFoundException, UnprocessableEntityException

from largesse import db
from largesse.catalog.models import products
from largesse.funding.models import ledger_entries
from tests.factories import available_cents, ok
from tests.fraud.conftest import events_for, link_reward, payout_count, redeem, refund_count, tagged
from tests.redemption.conftest import GIFT_CARD, fake_ip


def review_ip(api, *ips: str) -> None:
    api.fraud_rule("review_ip", FraudRuleRequest(config=FraudRuleRequestConfig(ReviewIp(ips=list(ips)))))


def test_flagged_redemption_is_held_then_released_once(org, api, engine, webhook, cli):
    ip = fake_ip()
    review_ip(api, ip.rsplit(".", 1)[0] + ".0/24")
    reward_id, link = link_reward(org)
    page = redeem(link, ip=ip)
    assert "under review" in page and "TEST-" not in page
    assert payout_count(engine, reward_id) == 0
    assert "REWARDS.FLAGGED" in events_for(engine, org.id, reward_id)
    assert api.get_reward(reward_id).reward.id == reward_id  # still an ordinary, unredeemed reward

    listed = api.list_fraud_reviews(status="flagged")
    assert listed.total_count == 1
    item = listed.fraud_reviews[0]
    assert (item.status, item.reasons, item.geo.ip, item.reward.id) == ("flagged", ["Disallowed IP"], ip, reward_id)
    assert item.redemption_method == "merchant card" and item.reviewed_by is None
    review = api.get_fraud_review(reward_id).fraud_review
    assert review.risk == "low" and review.related_rewards.count == 0
    assert "under review" in redeem_page(link) and "csrf_token" not in redeem_page(link)  # no second choice

    released = api.release_fraud_review(reward_id).fraud_review
    assert released.status == "released" and released.reviewed_at is not None
    assert released.reviewed_by  # the API key that released it
    assert payout_count(engine, reward_id) == 1
    with pytest.raises(UnprocessableEntityException):
        api.block_fraud_review(reward_id)
    assert api.release_fraud_review(reward_id).fraud_review.status == "released"  # idempotent, below
    assert payout_count(engine, reward_id) == 1
    assert "TEST-" in redeem_page(link)
    assert api.list_fraud_reviews(status="released").total_count == 1
    assert api.list_fraud_reviews(status="flagged").total_count == 0
    cli("ledger", "verify")


def redeem_page(link: str) -> str:
    from tests.redemption.conftest import page_client

    with page_client() as client:
        return client.get(link).text


def test_block_cancels_and_refunds_exactly_once(org, api, engine, http, cli):
    ip = fake_ip()
    review_ip(api, ip)
    reward_id, link = link_reward(org, denomination=40)
    after_order = available_cents(http)
    redeem(link, ip=ip)
    blocked = api.block_fraud_review(reward_id).fraud_review
    assert blocked.status == "blocked" and blocked.reviewed_by
    assert available_cents(http) == after_order + 4000
    assert refund_count(engine, reward_id) == 1
    assert api.block_fraud_review(reward_id).fraud_review.status == "blocked"  # idempotent, below
    assert available_cents(http) == after_order + 4000
    assert "canceled" in redeem_page(link)
    assert payout_count(engine, reward_id) == 0
    cli("ledger", "verify")


def trail(engine, http, org, reward_id: str) -> tuple:
    """Everything a decision may change: balance, payouts, refunds, the reward's ledger entries
    and its webhook events."""
    with db.read(engine) as conn:
        entries = conn.execute(select(func.count()).select_from(ledger_entries).where(
            ledger_entries.c.reward_id == reward_id)).scalar_one()
    return (available_cents(http), payout_count(engine, reward_id), refund_count(engine, reward_id), entries,
            sorted(events_for(engine, org.id, reward_id)))


def held(org, api) -> str:
    ip = fake_ip()
    review_ip(api, ip)
    reward_id, link = link_reward(org)
    redeem(link, ip=ip)
    return reward_id


def test_releasing_a_released_review_again_is_200_and_changes_nothing(org, api, engine, http, webhook, cli):
    """release_fraud_review's client decodes no 422: a repeated release (a retry after a lost
    answer) answers the review as it is, with no second payout, event or ledger entry."""
    reward_id = held(org, api)
    first = api.release_fraud_review(reward_id).fraud_review
    after = trail(engine, http, org, reward_id)
    assert after[1:3] == (1, 0) and "REWARDS.FLAGGED" in after[4]
    for _ in range(2):
        again = api.release_fraud_review(reward_id).fraud_review
        assert (again.status, again.reviewed_by, again.reviewed_at) == ("released", first.reviewed_by,
                                                                        first.reviewed_at)
        assert again.reward.id == reward_id
        assert trail(engine, http, org, reward_id) == after
    with pytest.raises(UnprocessableEntityException) as raised:  # block decodes 422: the other decision
        api.block_fraud_review(reward_id)
    assert raised.value.data.errors.payload == {"id": ["is already released"]}
    assert trail(engine, http, org, reward_id) == after
    cli("ledger", "verify")


def test_blocking_a_blocked_review_again_is_200_and_changes_nothing(org, api, engine, http, webhook, cli):
    reward_id = held(org, api)
    first = api.block_fraud_review(reward_id).fraud_review
    after = trail(engine, http, org, reward_id)
    assert after[1:3] == (0, 1) and after[4].count("REWARDS.CANCELED") == 1
    again = api.block_fraud_review(reward_id).fraud_review
    assert (again.status, again.reviewed_by, again.reviewed_at) == ("blocked", first.reviewed_by, first.reviewed_at)
    assert trail(engine, http, org, reward_id) == after
    # Releasing a blocked review stays 422 (documented): the 6.0 client raises it without
    # decoding it (.data is None), the error body is in .body.
    with pytest.raises(UnprocessableEntityException) as raised:
        api.release_fraud_review(reward_id)
    assert raised.value.data is None
    assert json.loads(raised.value.body)["errors"]["payload"] == {"id": ["is already blocked"]}
    assert trail(engine, http, org, reward_id) == after
    cli("ledger", "verify")


def test_release_of_a_product_no_longer_offered_is_422_and_keeps_the_review_open(org, api, engine, http):
    """Documented: 422 (not decoded by release's client: .data is None, the body has the
    message); the review stays flagged, nothing is paid, and it can be released later or blocked."""
    reward_id = held(org, api)
    before = available_cents(http)
    with db.write(engine) as conn:
        conn.execute(update(products).where(products.c.id == GIFT_CARD).values(active=False))
    try:
        with pytest.raises(UnprocessableEntityException) as raised:
            api.release_fraud_review(reward_id)
    finally:
        with db.write(engine) as conn:
            conn.execute(update(products).where(products.c.id == GIFT_CARD).values(active=True))
    assert raised.value.data is None
    assert json.loads(raised.value.body)["errors"]["payload"] == {"id": ["No longer offered"]}
    assert api.get_fraud_review(reward_id).fraud_review.status == "flagged"
    assert (payout_count(engine, reward_id), available_cents(http)) == (0, before)
    assert api.release_fraud_review(reward_id).fraud_review.status == "released"
    assert payout_count(engine, reward_id) == 1


def test_concurrent_releases_both_answer_200_and_pay_once(org, api, engine, http, cli):
    reward_id = held(org, api)
    before = available_cents(http)
    barrier, outcomes, errors = threading.Barrier(2), [], []

    def release():
        client = org.api()
        barrier.wait()
        try:
            outcomes.append(client.release_fraud_review(reward_id).fraud_review.status)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=release) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and outcomes == ["released", "released"]
    assert (payout_count(engine, reward_id), refund_count(engine, reward_id)) == (1, 0)
    assert available_cents(http) == before
    cli("ledger", "verify")


def test_allow_list_wins_over_review_list(org, api, engine, http):
    ip = fake_ip()
    review_ip(api, ip)
    http.post("/fraud_rules/allow_ip", json={"config": {"ips": [ip]}})
    reward_id, link = link_reward(org)
    assert "TEST-" in redeem(link, ip=ip)
    assert api.list_fraud_reviews().total_count == 0


def test_country_from_the_offline_database(org, api, engine, http):
    assert http.post("/fraud_rules/review_country",
                     json={"config": {"type": "blacklist", "countries": ["GB"]}}).status_code == 200
    held, link = link_reward(org)
    redeem(link, ip="81.2.69.142")  # a British address in iptocc's data
    paid, other = link_reward(org)
    assert "TEST-" in redeem(other, ip="8.8.8.8")  # the United States
    review = api.get_fraud_review(held).fraud_review
    assert review.reasons == ["Disallowed country"] and review.geo.country == "GB"
    with pytest.raises(NotFoundException):
        api.get_fraud_review(paid)


def test_email_lists_match_the_mailbox_as_members_are_compared(org, api, http):
    """review_email listed alice@x; her +tag address (the same mailbox, an allowed sandbox
    recipient) was not held. allow_email likewise takes the mailbox."""
    assert http.post("/fraud_rules/review_email", json={"config": {"emails": [org.member_email.upper()]}}
                     ).status_code == 200
    held, link = link_reward(org, email=tagged(org.member_email, "promo"))
    redeem(link)
    assert api.get_fraud_review(held).fraud_review.reasons == ["Disallowed email"]
    assert http.post("/fraud_rules/allow_email", json={"config": {"emails": [tagged(org.member_email, "x")]}}
                     ).status_code == 200
    allowed, link = link_reward(org)
    assert "TEST-" in redeem(link)  # allowed, listed by another of its spellings: never held
    with pytest.raises(NotFoundException):
        api.get_fraud_review(allowed)


def test_an_allowed_address_does_not_allow_its_lookalike(org, api, http):
    """allow_email of kim@ must not exempt \u212aim@ (KELVIN SIGN), another mailbox: both the
    rule's entry and the recipient were lower-cased with Unicode rules, which make it kim@."""
    kim = f"kim-{org.id.lower()}@example.org"
    lookalike = kim.replace("k", "\u212a", 1)
    for address in (kim, lookalike):
        ok(http.post("/members", json={"email": address, "role": "MEMBER"}))
    ok(http.post("/fraud_rules/review_email", json={"config": {"domains": ["example.org"]}}))
    ok(http.post("/fraud_rules/allow_email", json={"config": {"emails": [kim.upper()]}}))
    allowed, link = link_reward(org, email=kim)
    assert "TEST-" in redeem(link)
    held, link = link_reward(org, email=lookalike)
    redeem(link)
    assert api.get_fraud_review(held).fraud_review.reasons == ["Disallowed email"]
    with pytest.raises(NotFoundException):
        api.get_fraud_review(allowed)


def test_email_count_amount_device_and_blocked_rules(org, api, engine, http):
    for rule_type, config in (("review_email", {"domains": ["example.com"]}),):
        assert http.post(f"/fraud_rules/{rule_type}", json={"config": config}).status_code == 200
    first, link = link_reward(org)
    redeem(link)
    assert api.get_fraud_review(first).fraud_review.reasons == ["Disallowed email"]
    http.delete("/fraud_rules/review_email")

    http.post("/fraud_rules/review_redeemed_rewards_count", json={"config": {"amount": 1, "period": "30"}})
    http.post("/fraud_rules/review_redeemed_rewards_amount", json={"config": {"amount": 30, "period": "7"}})
    paid, link = link_reward(org, denomination=20)
    assert "TEST-" in redeem(link)  # the recipient's first redemption: 1 reward, 20.00
    over, link = link_reward(org, denomination=15)
    redeem(link)
    assert api.get_fraud_review(over).fraud_review.reasons == ["Over reward count limit", "Over reward amount limit"]
    assert api.get_fraud_review(over).fraud_review.risk == "medium"
    http.delete("/fraud_rules/review_redeemed_rewards_count")
    http.delete("/fraud_rules/review_redeemed_rewards_amount")

    # One browser (its device cookie) redeeming for a second email address.
    http.post("/fraud_rules/review_multiple_emails")
    from tests.redemption.conftest import page_client

    with page_client() as browser:
        _, link = link_reward(org)
        browser.get(link)
        device = dict(browser.cookies)
    assert "largesse_device" in device
    mine, link = link_reward(org)
    redeem(link, cookies=device)
    theirs, link = link_reward(org, email=tagged(org.member_email, "second"))
    redeem(link, cookies=device)
    review = api.get_fraud_review(theirs).fraud_review
    assert review.reasons == ["Device related to multiple emails"]
    assert mine in review.related_rewards.ids
    http.delete("/fraud_rules/review_multiple_emails")

    # An address used by a blocked reward holds the next one.
    http.post("/fraud_rules/review_previously_blocked_recipients")
    api.block_fraud_review(theirs)
    again, link = link_reward(org, email=tagged(org.member_email, "third"))
    redeem(link, cookies=device)
    assert api.get_fraud_review(again).fraud_review.reasons == ["Device related to a blocked reward"]
    assert api.get_fraud_review(again).fraud_review.risk == "high"
    assert api.list_fraud_reviews(status="blocked").total_count == 1
    assert api.list_fraud_reviews(limit=2).total_count == 4 and len(api.list_fraud_reviews(limit=2).fraud_reviews) == 2


def test_three_reasons_are_high_risk(org, api, http):
    """docs/fraud.md: risk is high with 3 or more reasons (medium with 2, low with 1)."""
    ip = fake_ip()
    review_ip(api, ip)
    for rule_type, config in (("review_email", {"domains": ["example.com"]}),
                              ("review_country", {"type": "whitelist", "countries": ["US"]})):
        assert http.post(f"/fraud_rules/{rule_type}", json={"config": config}).status_code == 200
    reward_id, link = link_reward(org)
    redeem(link, ip=ip)  # a private address: no country, so the whitelist holds it too
    review = ok(http.get(f"/fraud_reviews/{reward_id}"))["fraud_review"]
    assert review["reasons"] == ["Disallowed IP", "Disallowed email", "Disallowed country"]
    assert review["risk"] == "high"


def test_the_amount_limit_holds_only_over_it(org, api, engine, http):
    """docs/fraud.md: review_redeemed_rewards_amount holds a redemption that takes the total
    *over* the limit: with 30.00, a recipient's 20.00 then 10.00 (exactly 30.00) are both paid."""
    http.post("/fraud_rules/review_redeemed_rewards_amount", json={"config": {"amount": 30, "period": "7"}})
    first, link = link_reward(org, denomination=20)
    assert "TEST-" in redeem(link)
    second, link = link_reward(org, denomination=10)
    assert "TEST-" in redeem(link)
    assert payout_count(engine, second) == 1
    assert ok(http.get("/fraud_reviews"))["total_count"] == 0
    third, link = link_reward(org, denomination=5)  # anything more is over it
    assert "under review" in redeem(link)
    assert api.get_fraud_review(third).fraud_review.reasons == ["Over reward amount limit"]


def test_reviews_are_scoped_and_validated(org, other_org, api, http):
    ip = fake_ip()
    review_ip(api, ip)
    reward_id, link = link_reward(org)
    redeem(link, ip=ip)
    stranger = other_org.api()
    assert stranger.list_fraud_reviews().total_count == 0
    for call in (stranger.get_fraud_review, stranger.release_fraud_review, stranger.block_fraud_review):
        with pytest.raises(NotFoundException):
            call(reward_id)
    assert http.get("/fraud_reviews", params={"status": "pending"}).status_code == 400
    assert http.get("/fraud_reviews", params={"redeemed_at[gte]": "yesterday"}).status_code == 400
    assert http.get("/fraud_reviews", params={"redeemed_at[gte]": "0001-01-01T00:00:00+01:00"}).status_code == 400
    assert api.list_fraud_reviews(redeemed_at_gte="2000-01-01T00:00:00Z").total_count == 1
    assert api.list_fraud_reviews(created_at_lte="2000-01-01T00:00:00Z").total_count == 0


def _decide(org, action: str, reward_id: str, barrier: threading.Barrier, outcomes: dict) -> None:
    client = org.api()
    barrier.wait()
    try:
        getattr(client, f"{action}_fraud_review")(reward_id)
        outcomes[action] = 200
    except Exception as exc:  # the loser: 422
        outcomes[action] = exc.status


def test_concurrent_release_and_block_one_wins(org, api, engine, http, cli):
    for _ in range(3):
        ip = fake_ip()
        review_ip(api, ip)
        reward_id, link = link_reward(org)
        redeem(link, ip=ip)
        before = available_cents(http)
        barrier, outcomes = threading.Barrier(2), {}
        threads = [threading.Thread(target=_decide, args=(org, a, reward_id, barrier, outcomes))
                   for a in ("release", "block")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes.values()) == [200, 422], outcomes
        if outcomes["release"] == 200:
            assert (payout_count(engine, reward_id), refund_count(engine, reward_id)) == (1, 0)
            assert available_cents(http) == before
        else:
            assert (payout_count(engine, reward_id), refund_count(engine, reward_id)) == (0, 1)
            assert available_cents(http) == before + 2500
    cli("ledger", "verify")


def test_released_reward_without_rules_is_paid_as_before(org, api, engine):
    reward_id, link = link_reward(org, products=(GIFT_CARD,))
    assert "TEST-" in redeem(link)
    assert payout_count(engine, reward_id) == 1
    assert api.list_fraud_reviews().total_count == 0


def test_second_tab_posting_after_the_hold_sees_the_review_page(org, api, engine):
    from tests.redemption.conftest import csrf_of, page_client

    ip = fake_ip()
    review_ip(api, ip)
    reward_id, link = link_reward(org)
    with page_client(ip) as first, page_client(ip) as second:
        forms = [(client, csrf_of(client.get(link).text)) for client in (first, second)]
        assert forms[0][0].post(link, data={"csrf_token": forms[0][1], "product_id": GIFT_CARD}).status_code == 303
        late = forms[1][0].post(link, data={"csrf_token": forms[1][1], "product_id": GIFT_CARD})
    assert late.status_code == 200 and "under review" in late.text
    assert payout_count(engine, reward_id) == 0 and api.list_fraud_reviews().total_count == 1


def test_count_limit_also_counts_one_address_with_several_emails(org, api, http, engine):
    assert http.post("/fraud_rules/review_redeemed_rewards_count",
                     json={"config": {"amount": 1, "period": "7"}}).status_code == 200
    ip = fake_ip()
    first, link = link_reward(org, email=tagged(org.member_email, "one"))
    assert "TEST-" in redeem(link, ip=ip)
    second, link = link_reward(org, email=tagged(org.member_email, "two"))
    assert "under review" in redeem(link, ip=ip)
    review = api.get_fraud_review(second).fraud_review
    assert review.reasons == ["Over reward count limit"] and first in review.related_rewards.ids
    assert payout_count(engine, second) == 0


def test_a_list_of_50000_addresses(org, api, http, engine):
    ips = [f"198.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}" for i in range(50_000)]
    assert http.post("/fraud_rules/review_ip", json={"config": {"ips": ips}}).status_code == 200
    assert len(api.list_fraud_rules().fraud_rules[0].config["ips"]) == 50_000
    held, link = link_reward(org)
    redeem(link, ip=ips[-1])
    paid, other = link_reward(org)
    assert "TEST-" in redeem(other, ip="198.200.0.1")
    assert api.get_fraud_review(held).fraud_review.reasons == ["Disallowed IP"]
    assert payout_count(engine, paid) == 1


def test_an_empty_status_filter_is_as_if_absent(org, api, http):
    """docs/api.md: an empty query parameter is as if it were absent, for the status filter too."""
    ip = fake_ip()
    review_ip(api, ip)
    reward_id, link = link_reward(org)
    redeem(link, ip=ip)
    listed = http.get("/fraud_reviews", params={"status": ""})
    assert listed.status_code == 200, listed.text
    assert listed.json()["total_count"] == 1 and listed.json()["fraud_reviews"][0]["reward"]["id"] == reward_id
    assert http.get("/fraud_reviews", params={"status": "pending"}).status_code == 400


def test_related_rewards_add_up_in_the_reviews_currency_converted(org, api, http):
    """aggregated_value left out every related reward in another currency (0 for a EUR review
    of an address that redeemed 30 USD); they are converted at today's rates."""
    from tests.conftest import order_body

    ip = fake_ip()
    review_ip(api, ip)
    usd, link = link_reward(org, denomination=30)
    redeem(link, ip=ip)
    body = order_body(org.member_email, method="LINK", products=["PVCMERIDEU01EU"], denomination=25)
    body["reward"]["value"]["currency_code"] = "EUR"
    eur = ok(http.post("/orders", json=body))["order"]["rewards"][0]
    redeem(eur["delivery"]["link"], ip=ip, product="PVCMERIDEU01EU")
    related = api.get_fraud_review(eur["id"]).fraud_review.related_rewards
    assert usd in related.ids and related.currency_code == "EUR"
    assert related.aggregated_value == 27.65  # 30 USD at the shipped 0.9215 EUR per USD, to the cent
    related = api.get_fraud_review(usd).fraud_review.related_rewards
    assert related.aggregated_value == 27.13 and related.currency_code == "USD"  # 25 EUR in USD
