"""Reports through the official client: create (CREATED at once), the worker generates the
CSV, get_report answers 202 then 200 with a signed link that serves text/csv."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select, update
from tremendous import CreateReportRequest
from tremendous.exceptions import ApiException, BadRequestException, NotFoundException

from largesse import db
from largesse.delivery.models import jobs
from largesse.reports.generate import COLUMNS
from largesse.reports.models import reports
from largesse.timeutil import utcnow
from tests.conftest import failing
from tests.factories import error, make_field, ok, order_body
from tests.fraud.conftest import events_for, link_reward, redeem


def request(**filters) -> CreateReportRequest:
    body = {"report_type": "digital_rewards", "format": "csv"}
    if filters:
        body["filters"] = {"digital_rewards": filters}
    return CreateReportRequest.from_dict(body)


@pytest.fixture
def work(deliver):
    """Run every due job once, as `largesse worker --once` does (tests/conftest.py: deliver)."""
    return deliver


def status_of(api, report_id: str):
    response = api.get_report_with_http_info(report_id)
    return response.status_code, response.data.report


def download(url: str) -> tuple[httpx.Response, list[list[str]]]:
    response = httpx.get(url, timeout=30)
    return response, list(csv.reader(io.StringIO(response.text)))


def test_report_is_generated_by_the_worker_and_downloaded(org, api, http, engine, work, webhook):
    field = make_field(http, options=("Sales", "Support"), name="Department")
    labelled = ok(http.post("/orders", json=order_body(org.member_email, denomination=12.5, custom_fields=[
        {"id": field["id"], "value": "Sales"}])))["order"]["rewards"][0]["id"]
    redeemed, link = link_reward(org, denomination=30)
    redeem(link)
    canceled = ok(http.post("/orders", json=order_body(failing(org.member_email), denomination=7)))["order"][
        "rewards"][0]["id"]
    work()  # its delivery fails: it can be canceled (API.md §2.5)
    assert http.post(f"/rewards/{canceled}/cancel").status_code == 200
    hostile = ok(http.post("/orders", json=order_body(org.member_email, recipient={
        "name": "=HYPERLINK(\"http://x\")", "email": org.member_email})))
    assert hostile

    created = api.create_report(request())
    report_id = created.report.id
    assert created.report.status == "CREATED" and created.report.url is None
    code, report = status_of(api, report_id)
    assert (code, report.status) == (202, "CREATED")

    work()
    code, report = status_of(api, report_id)
    assert (code, report.status) == (200, "READY_FOR_DOWNLOAD")
    assert report.url.startswith(org.base_url + "/reports/download/")
    assert "REPORTS.GENERATION.SUCCEEDED" in events_for(engine, org.id, report_id)

    response, rows = download(report.url)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert f'filename="largesse-rewards-{report_id}-' in response.headers["content-disposition"]
    header, body = rows[0], rows[1:]
    assert header == [*COLUMNS, "Department"]
    by_id = {row[0]: dict(zip(header, row, strict=True)) for row in body}
    assert set(by_id) >= {labelled, redeemed, canceled} and len(body) == 4
    assert by_id[labelled]["amount"] == "12.50" and by_id[labelled]["Department"] == "Sales"
    assert by_id[redeemed]["reward_status"] == "REDEEMED" and by_id[redeemed]["redeemed_product_id"]
    assert by_id[canceled]["reward_status"] == "CANCELED" and by_id[canceled]["canceled_at"]
    assert any(row["recipient_name"].startswith("'=HYPERLINK") for row in by_id.values())  # made inert

    assert httpx.get(report.url[:-1] + ("0" if report.url[-1] != "0" else "1")).status_code == 404
    with db.write(engine) as conn:
        conn.execute(update(reports).where(reports.c.id == report_id)
                     .values(url_expires_at=utcnow() - timedelta(seconds=1)))
    assert httpx.get(report.url).status_code == 410
    assert status_of(api, report_id)[1].url is None


def test_filters_select_rewards(org, api, http, work):
    small = ok(http.post("/orders", json=order_body(failing(org.member_email), denomination=5)))["order"][
        "rewards"][0]["id"]
    work()  # its delivery fails: it can be canceled (API.md §2.5)
    big = ok(http.post("/orders", json=order_body(org.member_email, denomination=80)))["order"]
    linked, _ = link_reward(org, denomination=50)
    assert http.post(f"/rewards/{small}/cancel").status_code == 200
    cases = {
        "amount": (request(amount={"gte": 50, "lte": 80}), {big["rewards"][0]["id"], linked}),
        "canceled": (request(status=["canceled"]), {small}),
        "link": (request(delivery_method="link"), {linked}),
        "order": (request(order_id=big["id"]), {big["rewards"][0]["id"]}),
        "created": (request(created_at={"gte": "2000-01-01", "lte": "2000-12-31"}), set()),
        "mail": (request(delivery_method="mail"), set()),
    }
    ids = {name: api.create_report(req).report.id for name, (req, _) in list(cases.items())[:3]}
    work()
    ids.update({name: api.create_report(req).report.id for name, (req, _) in list(cases.items())[3:]})
    work()
    for name, (_, expected) in cases.items():
        code, report = status_of(api, ids[name])
        assert code == 200, name
        _, rows = download(report.url)
        assert {row[0] for row in rows[1:]} == expected, name


@pytest.mark.parametrize(("body", "payload"), [
    ({"format": "csv"}, {"report_type": ["is required"]}),
    ({"report_type": "gift_cards", "format": "csv"}, {"report_type": ["must be digital_rewards"]}),
    ({"report_type": "digital_rewards", "format": "pdf"}, {"format": ["must be csv"]}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {"amount": {"gte": "5"}}}},
     {"filters": {"digital_rewards": {"amount": {"gte": ["must be a number"]}}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {"amount": {"lte": 1.001}}}},
     {"filters": {"digital_rewards": {"amount": {"lte": ["must have at most 2 decimal places"]}}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {
        "created_at": {"gte": "2024-02-30"}}}},
     {"filters": {"digital_rewards": {"created_at": {"gte": ["must be a date (YYYY-MM-DD)"]}}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {"status": ["lost"]}}},
     {"filters": {"digital_rewards": {"status": {"0": [
         "must be one of delivered, canceled, delivery_failed, pending_review"]}}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {"order_status": "open"}}},
     {"filters": {"digital_rewards": {"order_status": [
         "must be one of executed, canceled, failed, pending_approval"]}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {
        "delivery_method": "pigeon"}}},
     {"filters": {"digital_rewards": {"delivery_method": ["must be one of phone, email, link, mail, direct"]}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": []}, {"filters": ["must be an object"]}),
])
def test_invalid_requests_answer_400_with_payload(http, body, payload):
    assert error(http.post("/reports", json=body), 400)["payload"] == payload


def test_unknown_ids_and_other_organizations(api, other_org, http):
    with pytest.raises(NotFoundException):
        api.create_report(request(campaign_id="CMPNOTMINE0001"))
    report_id = api.create_report(request()).report.id
    with pytest.raises(NotFoundException):
        other_org.api().get_report(report_id)
    with pytest.raises(BadRequestException) as raised:
        api.create_report(request(delivery_method="pigeon"))
    assert raised.value.data.errors.payload == {"filters": {"digital_rewards": {"delivery_method": [
        "must be one of phone, email, link, mail, direct"]}}}


def test_reports_in_progress_are_limited(org, api, work):
    work()  # nothing of this organization is in progress
    for _ in range(3):
        api.create_report(request())
    with pytest.raises(ApiException) as raised:
        api.create_report(request())
    assert raised.value.status == 429
    assert "reports are already being generated" in raised.value.body
    work()
    assert api.create_report(request()).report.status == "CREATED"


def test_last_failed_attempt_marks_the_report_failed(org, api, engine, work, webhook):
    report_id = api.create_report(request()).report.id
    with db.write(engine) as conn:
        # A filter the generator cannot apply (no request can store one): the job's only attempt fails.
        conn.execute(update(reports).where(reports.c.id == report_id).values(filters={"order_status": "bogus"}))
        conn.execute(update(jobs).where(jobs.c.kind == "generate_report", jobs.c.status == "queued",
                                        jobs.c.organization_id == org.id).values(max_attempts=1))
    work()
    code, report = status_of(api, report_id)
    assert (code, report.status, report.url) == (200, "FAILED", None)
    assert "REPORTS.GENERATION.FAILED" in events_for(engine, org.id, report_id)
    with db.read(engine) as conn:
        job = conn.execute(select(jobs).where(jobs.c.kind == "generate_report", jobs.c.organization_id == org.id)
                           ).first()
    assert job.status == "done"


def test_read_only_key_reads_reports_but_cannot_create_one(org, api, engine):
    from tremendous import ApiClient, Configuration, TremendousApi
    from tremendous.exceptions import ForbiddenException

    from largesse import auth

    report_id = api.create_report(request()).report.id
    with db.write(engine) as conn:
        _, key = auth.issue_key(conn, organization_id=org.id, permission="read_only")
    reader = TremendousApi(ApiClient(Configuration(host=f"{org.base_url}/api/v2", access_token=key)))
    assert reader.get_report(report_id).report.id == report_id
    with pytest.raises(ForbiddenException):
        reader.create_report(request())
