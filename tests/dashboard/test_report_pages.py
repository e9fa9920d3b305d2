"""Reports in the dashboard over HTTP: ask with filters (reports/service.py's create, as POST
/reports), the status, the worker generates it, the same signed download link as the API's;
the API's errors and limit; scoping and CSRF."""

from __future__ import annotations

import csv
import io
import re

import httpx

from largesse.delivery.worker import Worker
from tests.dashboard.conftest import csrf_of, text_of
from tests.factories import ok, place

DOWNLOAD = re.compile(r'href="(http://[^"]+/reports/download/[0-9a-f]{64})"')


def ask(client, **fields) -> httpx.Response:
    page = client.get("/dashboard/reports")
    assert page.status_code == 200, page.text
    data = {"csrf_token": csrf_of(page.text), **fields}
    return client.post("/dashboard/reports", data=data)


def test_ask_generate_and_download(admin, http, org, engine, server):
    place(http, org.member_email, denomination=12)
    place(http, org.member_email, denomination=80)
    Worker(engine, server.settings).drain()  # both delivered before the report is asked for
    response = ask(admin, amount_gte="50", **{"from": "2020-01-01"}, status=["delivered", "canceled"])
    assert response.status_code == 303
    page = admin.get(response.headers["location"])
    text = text_of(page.text)
    report_id = re.search(r"Report ([A-Z0-9]+) requested", text).group(1)
    assert "Waiting to be generated" in text and f"Check report {report_id} again" in text
    assert "amount from 50.00 USD; created from 2020-01-01; reward status canceled or delivered" in text
    api_report = http.get(f"/reports/{report_id}")  # the API sees the same report, in progress
    assert api_report.status_code == 202 and api_report.json()["report"]["status"] == "CREATED"
    assert not DOWNLOAD.search(page.text)

    Worker(engine, server.settings).drain()  # as `largesse worker --once`: generates the CSV
    detail = admin.get(f"/dashboard/reports/{report_id}")
    assert detail.status_code == 200 and "Ready to download" in text_of(detail.text)
    link = DOWNLOAD.search(detail.text).group(1)
    assert link == ok(http.get(f"/reports/{report_id}"))["report"]["url"]  # the link the API hands out
    assert link in admin.get("/dashboard/reports").text
    download = httpx.get(link)
    assert download.status_code == 200 and download.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(download.text)))
    assert [row["amount"] for row in rows] == ["80.00"]  # the filter applied: not the 12.00 reward


def test_report_form_shows_the_apis_errors(admin, http, other_org):
    response = ask(admin, amount_gte="lots")
    assert response.status_code == 400 and "Smallest amount: must be a number" in text_of(response.text)
    response = ask(admin, **{"from": "2024-13-45"})
    assert response.status_code == 400 and "Created from: must be a date" in text_of(response.text)
    response = ask(admin, status="bogus")  # never dropped into a report of all rewards
    assert response.status_code == 400 and "Reward status: must be one of" in text_of(response.text)
    response = ask(admin, status=["delivered", "bogus"])
    assert response.status_code == 400 and "Reward status: must be one of" in text_of(response.text)
    response = ask(admin, amount_gte="80", amount_lte="50")
    assert response.status_code == 400
    assert "Largest amount: must be at least smallest amount" in text_of(response.text)
    with other_org.http() as other:
        foreign = place(other, other_org.member_email)["id"]
    response = ask(admin, order=foreign)  # another organization's order: the API's 400, on the form
    assert response.status_code == 400 and f"Order {foreign} not found" in text_of(response.text)
    assert "No reports yet" in text_of(admin.get("/dashboard/reports").text)


def test_report_amounts_follow_the_dashboards_amount_rule(admin):
    """The amount boxes read as every amount of the dashboard (forms.read_amount): a comma only
    between thousands; "7,5" is refused with a suggestion, never read as 75."""
    response = ask(admin, amount_lte="7,5")
    assert response.status_code == 400 and "Largest amount: use a dot for decimals: 7.50" in text_of(response.text)
    assert 'value="7,5"' in response.text  # kept in the box
    assert "No reports yet" in text_of(admin.get("/dashboard/reports").text)
    response = ask(admin, amount_gte="1,000", amount_lte="12,345.50")
    assert response.status_code == 303
    text = text_of(admin.get(response.headers["location"]).text)
    assert "amount from 1,000.00 USD; amount up to 12,345.50 USD" in text


def test_reports_in_progress_are_limited_as_in_the_api(admin):
    from largesse.reports.service import MAX_IN_PROGRESS

    for _ in range(MAX_IN_PROGRESS):
        assert ask(admin).status_code == 303
    response = ask(admin)
    assert response.status_code == 429
    assert f"{MAX_IN_PROGRESS} reports are already being generated" in text_of(response.text)


def test_another_orgs_report_is_not_found(admin, other_org):
    with other_org.http() as other:
        report = ok(other.post("/reports", json={"report_type": "digital_rewards", "format": "csv"}))["report"]
    response = admin.get(f"/dashboard/reports/{report['id']}")
    assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")
    assert report["id"] not in admin.get("/dashboard/reports").text


def test_members_may_ask_for_reports_but_not_without_csrf(member_client, admin, http):
    # Reports are part of "view" (orgs/roles.py): a MEMBER asks for one like an administrator.
    assert ask(member_client).status_code == 303
    response = admin.post("/dashboard/reports", data={})
    assert response.status_code == 403 and "Please try again" in text_of(response.text)
    assert len(re.findall(r"Waiting to be generated", admin.get("/dashboard/reports").text)) == 1


def test_viewer_role_sees_reports_but_not_approvals_or_funding(engine, server, org):
    from tests.dashboard.conftest import add_member, signed_in

    mid, _ = add_member(engine, org.id, role="VIEWER")
    viewer = signed_in(engine, server.url, org.id, mid)
    try:
        assert viewer.get("/dashboard/reports").status_code == 200
        for path in ("/dashboard/approvals", "/dashboard/funding/invoices", "/dashboard/funding/topups"):
            assert viewer.get(path).status_code == 403, path
    finally:
        viewer.close()
