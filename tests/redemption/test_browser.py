"""The recipient's journey in headless Chromium: order -> link -> page -> choice -> payout."""

from __future__ import annotations

from tests.redemption.conftest import CHARITY, COFFEE, GIFT_CARD, link_reward


def test_journey_in_the_browser(org, browser_page):
    page = browser_page
    problems = []  # CSP violations and script errors show up here
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    _, link = link_reward(org, products=(GIFT_CARD, COFFEE, CHARITY))
    page.goto(link)
    assert page.locator("html").get_attribute("lang") == "en"
    assert page.get_by_role("heading", level=1).inner_text() == "Acme sent you a reward"
    group = page.get_by_role("group", name="Choose your reward")
    assert group.get_by_role("radio").count() == 3
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scrolling on a phone
    page.get_by_role("radio", name="Harbor Coffee Co.").check()
    page.get_by_role("button", name="Confirm my choice").click()
    page.wait_for_url(link)
    code = page.locator("#code-value").inner_text()
    assert code.startswith("TEST-") and page.get_by_text("Sandbox test code — has no value").is_visible()
    assert page.get_by_role("button", name="Copy code").is_visible()  # the script ran under the CSP
    page.reload()
    assert page.locator("#code-value").inner_text() == code
    assert page.get_by_role("radio").count() == 0
    assert problems == []


def test_keyboard_only_selection(org, browser_page):
    page = browser_page
    _, link = link_reward(org, products=(GIFT_CARD, COFFEE))
    page.goto(link)
    page.keyboard.press("Tab")  # the skip link comes first
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.value") == GIFT_CARD
    focused = page.locator(".option", has=page.locator("input:focus-visible"))
    assert focused.evaluate("el => getComputedStyle(el).outlineStyle") == "solid"  # visible focus
    page.keyboard.press("ArrowDown")  # arrows move and select within the radio group
    assert page.get_by_role("radio", name="Harbor Coffee Co.").is_checked()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent").strip() == "Confirm my choice"
    page.keyboard.press("Enter")
    page.wait_for_selector("#code-value")
    assert page.get_by_role("heading", level=1).inner_text() == "Your Harbor Coffee Co."
