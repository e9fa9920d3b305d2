"""Fraud reviews in the dashboard over HTTP: redemptions held by a fraud rule are listed,
released (paid once) or blocked (refunded once) with the service behind PUT
/fraud_reviews/{id}/release|block; the reward's page says it is under review; scoping, roles."""

from __future__ import annotations

import re

from tremendous import FraudRuleRequest, FraudRuleRequestConfig, ReviewIp

from tests.dashboard.conftest import csrf_of, member_id, text_of
from tests.factories import available_cents
from tests.fraud.conftest import link_reward, payout_count, redeem, refund_count
from tests.redemption.conftest import fake_ip, page_client


def held(org, *, denomination=25) -> tuple[str, str, str]:
    """A LINK reward whose redemption a review_ip rule held: (reward id, link, address)."""
    ip = fake_ip()
    org.api().fraud_rule("review_ip", FraudRuleRequest(config=FraudRuleRequestConfig(ReviewIp(ips=[ip]))))
    reward_id, link = link_reward(org, denomination=denomination)
    assert "under review" in redeem(link, ip=ip)
    return reward_id, link, ip


def recipient_page(link: str) -> str:
    with page_client() as client:
        return client.get(link).text


def post(client, page_path: str, action: str, data: dict | None = None):
    page = client.get(page_path)
    assert page.status_code == 200, page.text
    return client.post(action, data={"csrf_token": csrf_of(page.text), **(data or {})})


def test_list_release_once_and_the_reward_page(admin, engine, org, http):
    reward_id, link, ip = held(org)
    overview = text_of(admin.get("/dashboard").text)
    assert "1 redemption held by a fraud rule" in overview
    page = admin.get("/dashboard/reviews")
    assert page.status_code == 200
    text = text_of(page.text)
    assert reward_id in text and "25.00 USD" in text and "Disallowed IP" in text and ip in text
    assert "Under review" in text and f"Release reward {reward_id}" in text and f"Block reward {reward_id}" in text
    assert '<a href="/dashboard/reviews" aria-current="page">Reviews</a>' in page.text  # in the navigation
    forms = re.findall(r'<form method="post" action="/dashboard/reviews/[^"]+"[^>]*>', page.text)
    assert len(forms) == 2 and all('data-confirm="' in f for f in forms)
    assert reward_id not in text_of(admin.get("/dashboard/reviews?status=released").text)

    # The reward's page and the rewards list say it is held, with the reasons and a link.
    reward_page = admin.get(f"/dashboard/rewards/{reward_id}").text
    assert "Under review" in text_of(reward_page) and "Disallowed IP" in text_of(reward_page)
    assert f'href="/dashboard/reviews/{reward_id}"' in reward_page and "Not redeemed yet" not in reward_page
    assert "Under review" in text_of(admin.get("/dashboard/rewards").text)
    detail = text_of(admin.get(f"/dashboard/reviews/{reward_id}").text)
    assert "Risk Low" in detail and "Disallowed IP" in detail

    response = post(admin, "/dashboard/reviews", f"/dashboard/reviews/{reward_id}/release", {"from": "list"})
    assert response.status_code == 303, response.text
    text = text_of(admin.get(response.headers["location"]).text)
    assert f"Reward {reward_id} released" in text and f"by {org.member_email}" in text
    assert payout_count(engine, reward_id) == 1
    assert "TEST-" in recipient_page(link)
    review = org.api().get_fraud_review(reward_id).fraud_review
    assert review.status == "released" and review.reviewed_by == member_id(engine, org.id, org.member_email)

    # A second release (a double click, another tab) is harmless: the same answer, no second payout.
    token = csrf_of(admin.get("/dashboard/reviews").text)
    again = admin.post(f"/dashboard/reviews/{reward_id}/release", data={"csrf_token": token})
    assert again.status_code == 303
    assert payout_count(engine, reward_id) == 1
    # Blocking it now is the service's 422, shown on the page; nothing changes.
    blocked = admin.post(f"/dashboard/reviews/{reward_id}/block", data={"csrf_token": token})
    assert blocked.status_code == 422
    assert f"Fraud review {reward_id} was already released" in text_of(blocked.text)
    assert payout_count(engine, reward_id) == 1 and refund_count(engine, reward_id) == 0
    assert "Under review" not in text_of(admin.get(f"/dashboard/rewards/{reward_id}").text)
    assert reward_id in text_of(admin.get("/dashboard/reviews?status=released").text)
    assert "held by a fraud rule" not in text_of(admin.get("/dashboard").text)


def test_block_cancels_and_refunds_once(admin, engine, org, http):
    reward_id, link, _ = held(org, denomination=40)
    before = available_cents(http)
    response = post(admin, f"/dashboard/reviews/{reward_id}", f"/dashboard/reviews/{reward_id}/block")
    assert response.status_code == 303
    assert response.headers["location"].startswith(f"/dashboard/reviews/{reward_id}?")
    text = text_of(admin.get(response.headers["location"]).text)
    assert f"Reward {reward_id} blocked" in text and "Blocked" in text and "Block reward" not in text
    assert available_cents(http) == before + 4000 and refund_count(engine, reward_id) == 1
    again = post(admin, "/dashboard/reviews", f"/dashboard/reviews/{reward_id}/block")
    assert again.status_code == 303 and available_cents(http) == before + 4000
    assert refund_count(engine, reward_id) == 1 and payout_count(engine, reward_id) == 0
    release = post(admin, f"/dashboard/reviews/{reward_id}", f"/dashboard/reviews/{reward_id}/release")
    assert release.status_code == 422 and "already blocked" in text_of(release.text)
    assert payout_count(engine, reward_id) == 0
    assert "canceled" in recipient_page(link)
    reward_page = text_of(admin.get(f"/dashboard/rewards/{reward_id}").text)
    assert "Canceled" in reward_page and "then blocked" in reward_page


def test_another_organizations_review_is_not_found(admin, engine, other_org):
    reward_id, _, _ = held(other_org)
    assert admin.get(f"/dashboard/reviews/{reward_id}").status_code == 404
    assert reward_id not in admin.get("/dashboard/reviews").text
    token = csrf_of(admin.get("/dashboard/reviews").text)
    for action in ("release", "block"):
        assert admin.post(f"/dashboard/reviews/{reward_id}/{action}", data={"csrf_token": token}).status_code == 404
    assert payout_count(engine, reward_id) == 0 and refund_count(engine, reward_id) == 0
    assert other_org.api().get_fraud_review(reward_id).fraud_review.status == "flagged"


def test_a_member_may_not_decide(member_client, admin, engine, org):
    reward_id, _, _ = held(org)
    assert member_client.get("/dashboard/reviews").status_code == 403
    assert member_client.get(f"/dashboard/reviews/{reward_id}").status_code == 403
    overview = member_client.get("/dashboard").text
    assert 'href="/dashboard/reviews"' not in overview
    token = csrf_of(overview)
    for action in ("release", "block"):
        assert member_client.post(f"/dashboard/reviews/{reward_id}/{action}",
                                  data={"csrf_token": token}).status_code == 403
    assert payout_count(engine, reward_id) == 0 and refund_count(engine, reward_id) == 0
    # The member still sees that the reward is held, without the link to decide.
    reward_page = member_client.get(f"/dashboard/rewards/{reward_id}").text
    assert "Under review" in text_of(reward_page) and f'href="/dashboard/reviews/{reward_id}"' not in reward_page
    # A POST without the CSRF value changes nothing either.
    assert admin.post(f"/dashboard/reviews/{reward_id}/release", data={}).status_code == 403
    assert payout_count(engine, reward_id) == 0


def test_pages_list_flagged_first_then_newest(admin, engine, org):
    first, _, _ = held(org)
    released, _, _ = held(org)
    assert org.api().release_fraud_review(released).fraud_review.status == "released"
    last, _, _ = held(org)
    from largesse import db
    from largesse.dashboard.pages import reviews

    with db.read(engine) as conn:
        seen, before = [], None
        while True:
            rows, more = reviews.page_reviews(conn, org.id, status=None, before=before, limit=1)
            seen += [r.reward_id for r in rows]
            if not more:
                break
            before = reviews._parse_cursor(reviews._cursor_of(rows[-1]))
    assert seen == [last, first, released]
    bogus = admin.get("/dashboard/reviews?status=bogus")  # refused, never the whole list
    assert bogus.status_code == 400 and 'Status: "bogus" is not one of' in text_of(bogus.text)
    # Over HTTP: the pager's "Next page" link keeps the status filter.
    page = admin.get("/dashboard/reviews?status=flagged")
    assert "Next page" not in page.text and text_of(page.text).index(last) < text_of(page.text).index(first)
