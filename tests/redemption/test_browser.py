"""The recipient's journey in headless Chromium: order -> link -> page -> choice -> payout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redemption.conftest import CHARITY, COFFEE, GIFT_CARD, browser_required, chromium_path, link_reward

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_long_name_and_url_wrap_on_a_small_phone(org, browser):
    """A recipient name of one long word and a message with a long URL wrap: the page never
    scrolls sideways at 360 px, and a tap (mobile emulation) confirms the choice."""
    from tests.redemption.conftest import fake_ip

    name = "Alexandria Wolfeschlegelsteinhausenbergerdorff"
    url = "https://intranet.example.com/people/recognition-programme/2026-q4-winners-and-their-teams"
    _, link = link_reward(org, products=(GIFT_CARD, COFFEE, CHARITY),
                          recipient={"name": name, "email": org.member_email},
                          delivery={"method": "LINK", "meta": {"message": f"Details: {url}"}})
    context = browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True,
                                  extra_http_headers={"X-Forwarded-For": fake_ip()})
    try:
        page = context.new_page()
        page.goto(link)
        assert page.get_by_text(url).is_visible() and page.get_by_text(name).is_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        page.get_by_role("radio", name="Harbor Coffee Co.").tap()
        page.get_by_role("button", name="Confirm my choice").tap()
        page.wait_for_selector("#code-value")
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
    finally:
        context.close()


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


# --- finding the browser: a missing one skips on a laptop, fails in CI --------------------


@pytest.mark.parametrize(("ci", "require", "expected"), [
    (None, None, False), ("true", None, True), ("true", "0", False), (None, "1", True), ("false", "yes", True),
])
def test_browser_required_under_ci_or_the_variable(monkeypatch, ci, require, expected):
    for name, value in (("CI", ci), ("LARGESSE_REQUIRE_BROWSER", require)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert browser_required() is expected


def test_chromium_path_setting_then_path(monkeypatch, tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LARGESSE_CHROMIUM", str(fake))
    assert chromium_path()[0] == str(fake)
    monkeypatch.setenv("LARGESSE_CHROMIUM", str(tmp_path / "missing"))
    found, looked = chromium_path()
    assert found is None and "LARGESSE_CHROMIUM=" in looked  # a wrong setting is not papered over
    monkeypatch.delenv("LARGESSE_CHROMIUM")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert chromium_path()[0] == str(fake)


def test_missing_browser_fails_the_run_in_ci(tmp_path):
    """The real fixture, in a pytest process of its own, with CI=true and no browser."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LARGESSE_REQUIRE_BROWSER", "LARGESSE_REQUIRE_POSTGRES", "PYTEST_ADDOPTS")}
    env.update(CI="true", LARGESSE_CHROMIUM=str(tmp_path / "no-chromium-here"))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-rA",
         "tests/redemption/test_browser.py::test_keyboard_only_selection[sqlite]"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "the browser tests are required" in output and "no-chromium-here" in output, output
    assert "1 error in" in output and "skip" not in output.lower(), output


def test_text_at_twice_its_size_on_a_320_px_screen(org, browser):
    """WCAG 1.4.4 / 1.4.10: with the text at 200 % on a 320 px screen the page does not scroll
    sideways (the 5rem image column pushed the cards to 364 px), the amount stays on one line
    ("$1,99" / "9.99" misstated the reward), and the skip link stays out of sight until focused
    (its second line sat over the header)."""
    from tests.redemption.conftest import fake_ip

    _, link = link_reward(org, products=(CHARITY,), denomination=1999.99,
                          recipient={"name": "Alex", "email": org.member_email})
    context = browser.new_context(viewport={"width": 320, "height": 700},
                                  extra_http_headers={"X-Forwarded-For": fake_ip()})
    try:
        page = context.new_page()
        page.goto(link)
        page.evaluate("document.documentElement.style.fontSize = '200%'")
        assert page.evaluate("document.documentElement.scrollWidth") <= 320
        amount = page.locator(".amount")
        assert amount.inner_text().endswith("$1,999.99")
        lines = amount.evaluate("el => { const r = document.createRange(); r.selectNodeContents(el.lastChild);"
                                " return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }")
        assert lines == 1
        skip = page.locator(".skip-link")
        assert skip.evaluate("el => el.getBoundingClientRect().bottom") <= 0  # out of sight
        page.keyboard.press("Tab")
        assert skip.evaluate("el => el.getBoundingClientRect().top") >= 0  # shown when focused
        assert page.locator(".greeting bdi").inner_text() == "Alex"
    finally:
        context.close()
