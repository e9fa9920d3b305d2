"""The dashboard in headless Chromium (Debian's, through Playwright), on a phone and a desktop:
sign in by the emailed link, send one reward (its summary, Edit, Send), upload a CSV with a bad row and fix it, resend,
cancel, create and revoke an API key; axe-core finds no serious or critical violation and
the console stays clean (CSP violations show up there).

LARGESSE_SCREENSHOTS=docs/screenshots also writes dashboard-*.png there (desktop run).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.dashboard.conftest import deliver_mail, signin_links
from tests.factories import ok, place
from tests.redemption.conftest import fake_ip

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
VIEWPORTS = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1366, "height": 900}}
# The phone as a phone: a mobile layout viewport grows to what overflows, which a plain narrow window hides.
MOBILE = {"phone": {"is_mobile": True, "has_touch": True}, "desktop": {}}
SHOTS = os.environ.get("LARGESSE_SCREENSHOTS")


@pytest.fixture(params=list(VIEWPORTS))
def dashboard_page(request, browser):
    if not AXE.exists():
        pytest.fail("node_modules/axe-core is missing: run `make node_modules/.installed`", pytrace=False)
    context = browser.new_context(viewport=VIEWPORTS[request.param], **MOBILE[request.param],
                                  extra_http_headers={"X-Forwarded-For": fake_ip()})
    context.add_init_script(path=str(AXE))  # through the DevTools protocol: the page's CSP stays as it is
    page = context.new_page()
    page.problems = []
    page.on("console", lambda m: page.problems.append(m.text) if m.type == "error" and not _axe_in_preview(m.text)
            else None)
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    page.viewport_name = request.param
    yield page
    context.close()


def _axe_in_preview(text: str) -> bool:
    """The test's own axe init script, refused by the script-less sandbox of the campaign
    previews (the pages themselves carry no script there): not a problem of the page."""
    return "/dashboard/campaigns/preview/" in text and "frame is sandboxed" in text


def check(page, name: str) -> None:
    """axe-core on the current page: no serious or critical violation; no sideways scroll."""
    result = page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ['violations']});
        return r.violations.filter(v => ['serious', 'critical'].includes(v.impact))
                           .map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '));
    }""")
    assert result == [], f"{name}: {result}"
    width = page.viewport_size["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{name} scrolls sideways"
    if SHOTS and page.viewport_name == "desktop":
        page.screenshot(path=str(Path(SHOTS) / f"dashboard-{name}.png"), full_page=True)
    elif SHOTS and name == "overview":
        page.screenshot(path=str(Path(SHOTS) / "dashboard-overview-phone.png"), full_page=True)


def test_dashboard_journey(dashboard_page, engine, server, org, http):
    page = dashboard_page
    base = server.url
    # Sign in by the emailed link.
    page.goto(f"{base}/dashboard")
    page.wait_for_url(re.compile(r"/dashboard/signin\?next="))
    check(page, "signin")
    page.get_by_label("Email address").fill(org.member_email)
    page.get_by_role("button", name="Email me a sign-in link").click()
    page.get_by_text("Check your email").wait_for()
    deliver_mail(engine, server.settings)
    page.goto(signin_links(server.settings, org.member_email)[-1])
    assert page.get_by_role("heading", level=1).inner_text() == "You are about to sign in"
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/dashboard")
    assert page.get_by_role("heading", level=1).inner_text() == "Overview"
    check(page, "overview")

    # Send one reward.
    page.get_by_role("link", name="Send rewards").click()
    page.get_by_label("Search products").fill("books")
    page.get_by_role("button", name="Filter products").click()
    page.get_by_label("Recipient name").fill("Rita Recipient")
    page.get_by_label("Recipient email").fill(org.member_email)
    page.get_by_label("Amount", exact=True).fill("25")
    page.get_by_label("Northwind Books").check()
    check(page, "send")
    page.get_by_role("button", name="Continue").click()
    # The summary: the cost before anything moves; Edit keeps what was typed.
    page.get_by_role("heading", name="Check and send").wait_for()
    assert page.locator("dd.big").inner_text() == "25.00 USD"  # the total with fees
    check(page, "send-summary")
    page.get_by_role("button", name="Edit").click()
    assert page.get_by_label("Amount", exact=True).input_value() == "25"
    assert page.get_by_label("Northwind Books").is_checked()
    page.get_by_role("button", name="Continue").click()
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_url(re.compile(r"/dashboard/orders/[A-Z0-9]+$"))
    assert page.get_by_role("heading", level=1).inner_text().startswith("Order ")
    check(page, "order")

    # A CSV with a bad row, then fixed.
    page.goto(f"{base}/dashboard/send/bulk")
    email = org.member_email
    page.get_by_label("CSV file").set_input_files(files=[{"name": "team.csv", "mimeType": "text/csv", "buffer":
                                                         f"name,email,amount\nAda,{email},20\nBob,not-an-email,10\n"
                                                         .encode()}])
    page.get_by_label("Northwind Books").check()
    check(page, "bulk")
    page.get_by_role("button", name="Upload and check").click()
    page.get_by_text("1 row cannot be sent").wait_for()
    # Listed by line above the table (visible on a phone too), and on its row in the table.
    assert page.get_by_text("Line 3 (Bob): Recipient email: is not a valid email address").is_visible()
    assert page.get_by_role("cell", name=re.compile("is not a valid email address")).count() == 1
    assert page.get_by_role("button", name=re.compile("Place order")).count() == 0
    check(page, "bulk-preview-errors")
    page.get_by_role("link", name="Upload another file").click()
    page.get_by_label("CSV file").set_input_files(files=[{"name": "team.csv", "mimeType": "text/csv", "buffer":
                                                         f"name,email,amount\nAda,{email},20\nBob,{email},10\n"
                                                         .encode()}])
    page.get_by_label("Northwind Books").check()
    page.get_by_role("button", name="Upload and check").click()
    page.get_by_role("button", name="Place order of 2 rewards").wait_for()
    assert page.locator("dd.big").inner_text() == "30.00 USD"  # the total with fees
    check(page, "bulk-preview")
    page.get_by_role("button", name="Place order of 2 rewards").click()
    page.wait_for_url(re.compile(r"/dashboard/orders/[A-Z0-9]+$"))
    assert page.get_by_role("cell", name="Ada").count() + page.get_by_text("Ada").count() >= 1

    # Resend a failed delivery to a new address; cancel another failed one (only a reward whose
    # delivery failed can be canceled, API.md §2.5).
    local, domain = org.member_email.split("@")
    failing = place(http, f"{local}+fail@{domain}")["rewards"][0]
    canceled = place(http, f"{local}+fail@{domain}")["rewards"][0]
    deliver_mail(engine, server.settings)
    page.goto(f"{base}/dashboard/rewards/{failing['id']}")
    assert page.get_by_text("Email: Failed").is_visible()
    check(page, "reward")
    page.get_by_label("New email address (optional)").fill(org.member_email)
    page.get_by_role("button", name="Resend reward").click()
    page.get_by_text("The reward is queued to be sent again").wait_for()
    assert page.get_by_role("button", name="Cancel reward").count() == 0  # its delivery is pending again
    page.goto(f"{base}/dashboard/rewards/{canceled['id']}")
    # Irreversible: the browser asks first (dashboard.js, data-confirm); dismissing sends nothing.
    posts, dialogs = [], []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.once("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.get_by_role("button", name="Cancel reward").click()
    page.wait_for_timeout(300)
    assert dialogs and dialogs[0].startswith(f"Cancel reward {canceled['id']}?"), dialogs
    assert posts == [] and http.get(f"/rewards/{canceled['id']}").json()["reward"].get("redemption") is None
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cancel reward").click()
    page.get_by_text("The reward was canceled and refunded").wait_for()

    # Lists.
    page.get_by_role("link", name="Rewards", exact=True).click()
    page.get_by_label("Status").select_option("CANCELED")
    page.get_by_role("button", name="Filter rewards").click()
    page.get_by_role("link", name=canceled["id"]).wait_for()
    check(page, "rewards")
    page.get_by_role("link", name="Orders", exact=True).click()
    page.wait_for_url(re.compile(r"/dashboard/orders$"))  # axe needs the new document, not the old one leaving
    page.get_by_role("heading", level=1).wait_for()
    check(page, "orders")
    page.goto(f"{base}/dashboard/funding")
    check(page, "funding")
    page.goto(f"{base}/dashboard/campaigns/new")
    page.get_by_label("Campaign name").fill("Thank you")
    page.get_by_label("Page headline").fill("Thanks a lot")
    page.get_by_label("Northwind Books").check()
    page.frame_locator("#preview-page").get_by_text("Thanks a lot").wait_for()  # the live previews followed
    page.frame_locator("#preview-email").get_by_role("heading", name="Thanks a lot").wait_for()
    check(page, "campaign")
    page.get_by_role("button", name="Save campaign").click()
    page.get_by_text("Campaign saved").wait_for()
    for n in range(4):  # a table of several members: each row's visually hidden "Role of ..." label
        ok(http.post("/members", json={"email": f"teammate-{n}-{org.id.lower()}@example.org", "role": "MEMBER"}))
    page.goto(f"{base}/dashboard/team")
    check(page, "team")

    # Create an API key (shown once), then revoke it.
    page.goto(f"{base}/dashboard/developers")
    page.get_by_label("Label").fill("from the browser")
    page.get_by_role("button", name="Create API key").click()
    key = page.get_by_label("Your new API key").input_value()
    assert key.startswith("LRG_SANDBOX_")
    keys = page.get_by_role("button", name=re.compile("^Revoke key")).count()
    page.reload()  # post/redirect/get: no second key, and this one is not shown again
    page.get_by_text("It was shown once").wait_for()
    assert page.get_by_label("Your new API key").count() == 0
    assert page.get_by_role("button", name=re.compile("^Revoke key")).count() == keys
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name=f"Revoke key {key[:16]}").click()
    page.get_by_text("API key revoked").wait_for()
    check(page, "developers")
    # With a webhook, the page also holds its signing key, the test-event form (whose list
    # names the longest events) and its deliveries: still no sideways scroll on a phone.
    page.get_by_label("Webhook URL").fill("http://127.0.0.1:9/hook")  # loopback, nobody listens
    page.get_by_role("button", name="Save webhook URL").click()
    page.get_by_role("button", name="Send a test event").wait_for()
    check(page, "developers-webhook")
    [hook] = ok(http.get("/webhooks"))["webhooks"]
    assert http.delete(f"/webhooks/{hook['id']}").status_code == 204
    import httpx

    assert httpx.get(f"{base}/api/v2/orders", headers={"Authorization": f"Bearer {key}"}).status_code == 401

    # Keyboard: the skip link comes first and focus is visible.
    page.goto(f"{base}/dashboard")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Tab")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{base}/dashboard/signin")
    assert page.problems == [], page.problems


def test_approvals_funding_and_reports_journey(dashboard_page, engine, server, org, http):
    """Approve an order waiting for approval; create an invoice; ask for a report, let the
    worker generate it, and download it."""
    from largesse import db
    from largesse.dashboard import signin
    from largesse.delivery.worker import Worker
    from largesse.orders import approvals
    from tests.dashboard.conftest import member_id

    page = dashboard_page
    base = server.url
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
        token = signin.issue_token(conn, member_id=member_id(engine, org.id, org.member_email),
                                   organization_id=org.id)
    waiting = place(http, org.member_email, denomination=45)
    assert waiting["status"] == "PENDING APPROVAL"
    page.goto(signin.signin_link(base, token))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/dashboard")

    # Approve the order waiting for approval, from the overview's count.
    page.get_by_role("link", name="1 order waiting for approval").click()
    page.wait_for_url(f"{base}/dashboard/approvals")
    check(page, "approvals")
    page.get_by_role("button", name=f"Approve order {waiting['id']}").click()
    page.get_by_text(f"Order {waiting['id']} approved by {org.member_email}").wait_for()
    assert page.get_by_text("No order is waiting for approval").is_visible()
    assert http.get(f"/orders/{waiting['id']}").json()["order"]["status"] == "EXECUTED"

    # An invoice, and the top-ups page.
    page.goto(f"{base}/dashboard/funding/invoices")
    page.get_by_label("Amount").fill("500")
    page.get_by_label("PO number (optional)").fill("PO-42")
    page.get_by_role("button", name="Create invoice").click()
    page.get_by_text("Invoice created").wait_for()
    check(page, "invoices")
    page.get_by_role("link", name="Top-ups").click()
    page.get_by_label("Amount").fill("250")
    page.get_by_role("button", name="Request top-up").click()
    page.get_by_text("Top-up requested").wait_for()
    check(page, "topups")

    # Ask for a report; the worker generates it; download it.
    Worker(engine, server.settings).drain()  # the approved reward is delivered first
    page.get_by_role("link", name="Reports").click()
    page.get_by_label("Smallest amount").fill("40")
    page.get_by_label("Delivered").check()
    page.get_by_role("button", name="Ask for report").click()
    notice = page.get_by_text(re.compile(r"Report [A-Z0-9]+ requested"))
    notice.wait_for()
    report_id = re.search(r"Report ([A-Z0-9]+) requested", notice.inner_text()).group(1)
    Worker(engine, server.settings).drain()  # generates the report
    page.get_by_role("link", name=f"Check report {report_id} again").click()
    page.get_by_text("Ready to download").wait_for()
    page.goto(f"{base}/dashboard/reports")
    check(page, "reports")
    with page.expect_download() as download:
        page.get_by_role("link", name=f"Download report {report_id} (CSV)").click()
    content = Path(download.value.path()).read_text()
    assert content.startswith("reward_id,") and waiting["rewards"][0]["id"] in content
    assert page.problems == [], page.problems


def test_fraud_review_on_a_small_phone(browser, engine, server, org):
    """A redemption held by a fraud rule, at 375 px: the overview's count, the Reviews list, the
    reward's "Under review", then Release (confirmed) from the review's page; axe-core each time."""
    from tests.dashboard.test_review_pages import held

    def strict(name: str) -> None:  # check(), and then no axe violation of any impact
        check(page, name)
        found = page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']}))
            .violations.map(v => v.impact + ' ' + v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))""")
        assert found == [], f"{name}: {found}"

    reward_id, _, _ = held(org)
    base = server.url
    context, page, problems = signed_in_on_a_phone(browser, engine, base, org)
    try:
        page.get_by_role("link", name="1 redemption held by a fraud rule").click()
        page.wait_for_url(re.compile(r"/dashboard/reviews\?status=flagged$"))
        assert page.get_by_role("button", name=f"Release reward {reward_id}").is_visible()
        strict("reviews")
        page.goto(f"{base}/dashboard/rewards/{reward_id}")
        assert page.get_by_text("Disallowed IP").first.is_visible()
        strict("reward-under-review")
        page.get_by_role("link", name=f"Open the review of reward {reward_id}").click()
        page.wait_for_url(f"{base}/dashboard/reviews/{reward_id}")
        strict("review")
        dialogs = []
        page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
        page.get_by_role("button", name=f"Release reward {reward_id}").click()
        page.get_by_text(f"Reward {reward_id} released").wait_for()
        assert dialogs and dialogs[0].startswith(f"Release reward {reward_id}?"), dialogs
        strict("review-released")
        assert problems == [], problems
    finally:
        context.close()


def test_csv_problems_are_readable_on_a_small_phone(browser, engine, server, org):
    """At 375 px the preview's table scrolls sideways inside its box, its "Check" column out of
    sight: each row's reasons are also listed by line above it, within the screen."""
    base = server.url
    context, page, problems = signed_in_on_a_phone(browser, engine, base, org)
    try:
        page.goto(f"{base}/dashboard/send/bulk")
        email = org.member_email
        content = (f"name,email,amount\nAda Lovelace-Byron,{email},20\nBob Bobbington,{email},lots\n"
                   f"Cy Cyrillic,{email},7,5\n")
        page.get_by_label("CSV file").set_input_files(
            files=[{"name": "people.csv", "mimeType": "text/csv", "buffer": content.encode()}])
        page.get_by_label("Northwind Books").check()
        page.get_by_role("button", name="Upload and check").click()
        page.wait_for_url(re.compile(r"/dashboard/send/bulk/[A-Z0-9]+$"))
        page.get_by_text(re.compile(r"rows? cannot be sent")).wait_for()
        # Some element naming each reason lies wholly within the screen's width.
        for reason in ("must be a number", "this row has 4 cells but the header has 3"):
            seen = page.evaluate("""(reason) => [...document.querySelectorAll('main li, main td, main p')]
                .filter(e => e.textContent.toLowerCase().includes(reason))
                .some(e => { const r = e.getBoundingClientRect();
                             return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth; })""", reason)
            assert seen, f"{reason!r} is not visible within 375 px"
        check(page, "bulk-preview-phone")
        assert problems == [], problems
    finally:
        context.close()


def signed_in_on_a_phone(browser, engine, base: str, org):
    """(context, page, console errors) of a 375 px browser with axe loaded, signed in as the
    organization's member."""
    from largesse import db
    from largesse.dashboard import signin
    from tests.dashboard.conftest import member_id

    context = browser.new_context(viewport={"width": 375, "height": 812},
                                  extra_http_headers={"X-Forwarded-For": fake_ip()})
    context.add_init_script(path=str(AXE))
    page = context.new_page()
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.viewport_name = "phone-375"
    with db.write(engine) as conn:
        token = signin.issue_token(conn, member_id=member_id(engine, org.id, org.member_email),
                                   organization_id=org.id)
    page.goto(signin.signin_link(base, token))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/dashboard")
    return context, page, problems
