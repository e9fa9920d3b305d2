"""A redemption held by a fraud rule, in headless Chromium: under review, released over the
API through the official client, and the payout shown when the recipient comes back."""

from __future__ import annotations

from tremendous import FraudRuleRequest, FraudRuleRequestConfig, ReviewEmail

from tests.redemption.conftest import COFFEE, GIFT_CARD, link_reward


def test_review_then_release_in_the_browser(org, api, browser_page):
    page = browser_page
    problems = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    api.fraud_rule("review_email", FraudRuleRequest(config=FraudRuleRequestConfig(
        ReviewEmail(emails=[org.member_email]))))
    reward_id, link = link_reward(org, products=(GIFT_CARD, COFFEE))
    page.goto(link)
    page.get_by_role("radio", name="Harbor Coffee Co.").check()
    page.get_by_role("button", name="Confirm my choice").click()
    page.wait_for_url(link)
    assert page.get_by_role("heading", level=1).inner_text() == "Your reward is under review"
    assert page.locator("#code-value").count() == 0 and page.get_by_role("radio").count() == 0
    review = api.list_fraud_reviews(status="flagged").fraud_reviews[0]
    assert review.reward.id == reward_id and review.reasons == ["Disallowed email"]

    page.reload()  # still under review until someone decides
    assert page.get_by_role("heading", level=1).inner_text() == "Your reward is under review"
    assert api.release_fraud_review(reward_id).fraud_review.status == "released"

    page.goto(link)  # the recipient comes back to the same link
    assert page.get_by_role("heading", level=1).inner_text() == "Your Harbor Coffee Co."
    assert page.locator("#code-value").inner_text().startswith("TEST-")
    assert problems == []
