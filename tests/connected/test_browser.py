"""A connected member's sign-in link in headless Chromium: confirm, sign in, the way back."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from tremendous import (
    CreateConnectedOrganizationMemberRequest,
    CreateConnectedOrganizationMemberSessionRequest,
    CreateConnectedOrganizationRequest,
    CreateConnectedOrganizationRequestKybPrefill,
)


def test_sign_in_link_in_the_browser(org, api, browser_page):  # noqa: F811
    page = browser_page
    problems = []  # CSP violations and errors
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    connected = api.create_connected_organization(CreateConnectedOrganizationRequest(
        client_id="browser-1", kyb_prefill=CreateConnectedOrganizationRequestKybPrefill(company_name="Bright Co"),
    )).connected_organization
    member = api.create_connected_organization_member(CreateConnectedOrganizationMemberRequest(
        connected_organization_id=connected.id, external_name="Dana", external_email="dana@bright.example",
    )).connected_organization_member
    request = CreateConnectedOrganizationMemberSessionRequest(return_url="https://platform.example.com/home",
                                                              state="s-42")
    session = api.create_connected_organization_member_session(member.id, request).connected_organization_member_session

    page.goto(session.url)
    assert page.get_by_role("heading", level=1).inner_text() == "Sign in to Bright Co"
    assert page.get_by_text("You are about to sign in to Bright Co.").is_visible()
    page.get_by_role("button", name="Sign in to Bright Co").click()
    page.wait_for_selector("text=You are signed in to Bright Co as Dana.")
    assert page.get_by_role("heading", level=1).inner_text() == "Signed in to Bright Co"
    assert page.get_by_text("$5,000.00").is_visible()
    back = page.get_by_role("link", name="Return to platform.example.com")
    href = urlsplit(back.get_attribute("href"))  # not followed: tests stay on loopback
    assert (href.netloc, href.path, parse_qs(href.query)) == ("platform.example.com", "/home", {"state": ["s-42"]})
    assert problems == []  # the pages work under their CSP

    page.goto(session.url)  # the link is spent
    assert page.get_by_role("heading", level=1).inner_text() == "Link already used"
