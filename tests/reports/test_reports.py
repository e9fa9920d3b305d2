"""Reports through the official client: create (CREATED at once), the worker generates the
CSV, get_report answers 202 then 200 with a signed link that serves text/csv."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select, update
from tremendous import CreateReportRequest
from tremendous.exceptions import ApiException, BadRequestException, NotFoundException

from largesse import db
from largesse.delivery.models import jobs
from largesse.reports import generate, service
from largesse.reports.generate import COLUMNS
from largesse.reports.models import report_chunks, reports
from largesse.timeutil import utcnow
from tests.conftest import failing
from tests.factories import error, make_campaign, make_field, ok, order_body, place
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
        "name": "=HYPERLINK(\"http://x\");-2+3", "email": org.member_email})))
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
    # Made inert, also after a semicolon, where a spreadsheet of a semicolon locale splits the cell.
    assert "'=HYPERLINK(\"http://x\");'-2+3" in {row["recipient_name"] for row in by_id.values()}

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
    # a range that nothing can match is a mistake, not an empty report
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {
        "amount": {"gte": 80, "lte": 50}}}},
     {"filters": {"digital_rewards": {"amount": {"lte": [
         "must be at least filters.digital_rewards.amount.gte"]}}}}),
    ({"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": {
        "created_at": {"gte": "2024-03-02", "lte": "2024-03-01"}}}},
     {"filters": {"digital_rewards": {"created_at": {"lte": [
         "must not be before filters.digital_rewards.created_at.gte"]}}}}),
])
def test_invalid_requests_answer_400_with_payload(http, body, payload):
    assert error(http.post("/reports", json=body), 400)["payload"] == payload


def test_unknown_ids_and_other_organizations(api, other_org, http):
    report_id = api.create_report(request()).report.id
    with pytest.raises(NotFoundException):
        other_org.api().get_report(report_id)
    with pytest.raises(BadRequestException) as raised:
        api.create_report(request(delivery_method="pigeon"))
    assert raised.value.data.errors.payload == {"filters": {"digital_rewards": {"delivery_method": [
        "must be one of phone, email, link, mail, direct"]}}}


@pytest.mark.parametrize("key", ["order_id", "campaign_id"])
def test_a_filter_id_that_is_not_the_callers_answers_400_at_its_property(org, api, http, other_org, key):
    """An ID in a body that is not the caller's is 400 (docs/api.md): create_report's client
    decodes 400, not 404."""
    with other_org.http() as other:
        theirs = (place(other, other_org.member_email)["id"] if key == "order_id" else make_campaign(other)["id"])
    for value in ("NOTMINE0000001", theirs):
        with pytest.raises(BadRequestException) as raised:
            api.create_report(request(**{key: value}))
        assert raised.value.data.errors.payload == {"filters": {"digital_rewards": {key: ["not found"]}}}
        assert raised.value.data.errors.message == f"{'Order' if key == 'order_id' else 'Campaign'} {value} not found"
        body = error(http.post("/reports", json={"report_type": "digital_rewards", "format": "csv",
                                                 "filters": {"digital_rewards": {key: value}}}), 400)
        assert body["payload"] == {"filters": {"digital_rewards": {key: ["not found"]}}}
    mine = (place(http, org.member_email, method="LINK")["id"] if key == "order_id" else make_campaign(http)["id"])
    assert api.create_report(request(**{key: mine})).report.status == "CREATED"


def test_reports_in_progress_are_limited(org, api, work):
    """A burst of quick POSTs (the official client does not retry them) passes up to the limit;
    one more is 429 with Retry-After; once generated, the organization may ask again."""
    work()  # nothing of this organization is in progress
    assert service.MAX_IN_PROGRESS >= 20
    ids = [api.create_report(request()).report.id for _ in range(service.MAX_IN_PROGRESS)]
    assert len(set(ids)) == service.MAX_IN_PROGRESS
    with pytest.raises(ApiException) as raised:
        api.create_report(request())
    assert raised.value.status == 429 and raised.value.headers["Retry-After"] == "10"
    assert f"{service.MAX_IN_PROGRESS} reports are already being generated" in raised.value.body
    work()
    assert {status_of(api, report_id)[1].status for report_id in ids} == {"READY_FOR_DOWNLOAD"}
    assert api.create_report(request()).report.status == "CREATED"


def one_claim(engine, settings) -> list[str]:
    """What one mail-lane thread of `largesse worker` does with one claim (delivery/worker.py
    _step): claim a batch, run each job, record the sent emails. Returns the kinds it ran."""
    from largesse.delivery import jobs as job_queue
    from largesse.delivery import tasks
    from largesse.delivery.transport import open_transport
    from largesse.delivery.worker import BATCH

    ctx = tasks.Context(engine, settings, "test-worker", open_transport(settings))
    rows = job_queue.claim(engine, ctx.worker_id, limit=BATCH[job_queue.MAIL], lease_seconds=30,
                           lane=job_queue.MAIL)
    try:
        for item in tasks.prepare_batch(ctx, rows):
            tasks.run_claimed(ctx, item)
        tasks.complete_sent(ctx)
    finally:
        ctx.transport.close()
    return [row.kind for row in rows]


def test_a_report_runs_one_chunk_per_job_and_never_holds_up_emails(org, api, http, engine, work, base_settings,
                                                                   monkeypatch):
    """Generation holds a worker thread for one chunk at a time: an email queued behind a long
    report goes out after its first chunk, not after the whole report."""
    work()
    monkeypatch.setattr(generate, "PAGE", 2)  # a page of 2 rows, a chunk per page
    monkeypatch.setattr(generate, "CHUNK_CHARS", 1)
    ordered = [place(http, org.member_email, method="LINK", denomination=10 + i)["rewards"][0]["id"]
               for i in range(7)]
    report_id = api.create_report(request()).report.id
    email = place(http, org.member_email)["rewards"][0]["id"]  # its delivery job is queued after the report

    kinds = one_claim(engine, base_settings)
    assert kinds.count("generate_report") == 1 and "deliver_reward" in kinds
    assert api.get_reward(email).reward.delivery.status == "SUCCEEDED"
    code, report = status_of(api, report_id)
    assert (code, report.status) == (202, "PROCESSING")  # one chunk written, the rest queued

    work()
    code, report = status_of(api, report_id)
    assert (code, report.status) == (200, "READY_FOR_DOWNLOAD")
    _, rows = download(report.url)
    assert rows[0] == list(COLUMNS) and sorted(row[0] for row in rows[1:]) == sorted([*ordered, email])
    keys = [(row[COLUMNS.index("created_at")], row[0]) for row in rows[1:]]
    assert keys == sorted(keys)  # chunk after chunk, each row once, in (created_at, id) order
    with db.read(engine) as conn:
        chunks = conn.execute(select(func.count()).select_from(report_chunks).where(
            report_chunks.c.report_id == report_id)).scalar_one()
        runs = conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.kind == "generate_report", jobs.c.organization_id == org.id, jobs.c.status == "done")).scalar_one()
    assert (chunks, runs) == (4, 5)  # 8 rows, 2 a page: 4 full pages, then a run that finds no row


def test_a_run_that_lost_its_job_writes_nothing(org, api, http, engine, work, base_settings, monkeypatch):
    """A worker whose lease ran out (its job taken over) finishes its chunk but stores nothing
    and queues nothing: the job's new holder writes that chunk, once."""
    from largesse.delivery import jobs as job_queue
    from largesse.delivery import tasks
    from largesse.delivery.transport import open_transport

    work()
    monkeypatch.setattr(generate, "PAGE", 2)
    monkeypatch.setattr(generate, "CHUNK_CHARS", 1)
    for _ in range(5):
        place(http, org.member_email, method="LINK")
    report_id = api.create_report(request()).report.id
    one_claim(engine, base_settings)  # the header and the first page

    def state():
        with db.read(engine) as conn:
            chunks = conn.execute(select(func.count()).select_from(report_chunks).where(
                report_chunks.c.report_id == report_id)).scalar_one()
            queued = conn.execute(select(jobs.c.id).where(jobs.c.kind == "generate_report", jobs.c.organization_id
                                                          == org.id, jobs.c.status != "done")).scalars().all()
        return chunks, queued

    chunks, [next_job] = state()
    ctx = tasks.Context(engine, base_settings, "slow-worker", open_transport(base_settings))
    claimed = job_queue.claim(engine, ctx.worker_id, limit=20, lease_seconds=30, lane=job_queue.MAIL)
    job_queue.release(engine, ctx.worker_id, [r.id for r in claimed if r.id != next_job])  # not ours to run
    [row] = [r for r in claimed if r.id == next_job]
    with db.write(engine) as conn:  # its lease ran out and another worker took the job over
        conn.execute(update(jobs).where(jobs.c.id == next_job).values(locked_by="other-worker"))
    assert generate.generate_report(ctx, row) == "lost"
    assert state() == (chunks, [next_job])
    with db.write(engine) as conn:  # the other worker dies too: the job is reclaimed
        conn.execute(update(jobs).where(jobs.c.id == next_job).values(status="queued", locked_by=None,
                                                                     locked_until=None))
    work()
    code, report = status_of(api, report_id)
    assert (code, report.status) == (200, "READY_FOR_DOWNLOAD")
    _, rows = download(report.url)
    assert len(rows) == 6 and len({row[0] for row in rows[1:]}) == 5


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


def test_a_field_labelled_as_a_built_in_column_gets_a_column_name_of_its_own(org, api, http, work):
    amount = make_field(http, data_type="Text", options=None, name="Amount")
    ok(http.post("/orders", json=order_body(org.member_email, denomination=9, custom_fields=[
        {"id": amount["id"], "value": "nine"}])))
    report_id = api.create_report(request()).report.id
    work()
    _, rows = download(status_of(api, report_id)[1].url)
    header = rows[0]
    assert header == [*COLUMNS, "custom_field:Amount"] and len(set(header)) == len(header)
    row = dict(zip(header, rows[1], strict=True))
    assert (row["amount"], row["custom_field:Amount"]) == ("9.00", "nine")


def test_the_last_date_there_is_is_a_valid_upper_bound(org, api, http, work):
    """created_at.lte and delivered_at of 9999-12-31 (an open end, as some clients write it):
    the day after it cannot be computed, so there is no upper bound; the report is generated,
    never FAILED."""
    reward = place(http, org.member_email, method="LINK")["rewards"][0]["id"]  # delivered at once
    ids = [api.create_report(req).report.id for req in (
        request(created_at={"gte": "0001-01-01", "lte": "9999-12-31"}), request(created_at={"lte": "9999-12-31"}),
        request(delivered_at="9999-12-31"))]
    work()
    rows = []
    for report_id in ids:
        code, report = status_of(api, report_id)
        assert (code, report.status) == (200, "READY_FOR_DOWNLOAD"), report_id
        rows.append({row[0] for row in download(report.url)[1][1:]})
    assert rows == [{reward}, {reward}, set()]


def test_report_amounts_take_the_currencys_decimals(engine, server, work):
    """A JPY reward's amount is whole yen in the CSV (it was written 1200.00)."""
    from tests.yen_kit import yen_order_body, yen_org, yen_product

    yen = yen_org(engine, server.url)
    with yen.http() as http:
        ok(http.post("/orders", json=yen_order_body(yen.member_email, yen_product(engine), yen=1200)))
    report_id = yen.api().create_report(request()).report.id
    work()
    _, rows = download(yen.api().get_report(report_id).report.url)
    header, [line] = rows[0], rows[1:]
    assert (line[header.index("amount")], line[header.index("currency_code")]) == ("1200", "JPY")


def test_a_download_reads_no_chunk_past_the_files_size(org, api, http, work, caplog, backend):
    """The stream asked for one chunk more than the file had, after the client had every byte
    and closed: that query was cancelled, and on PostgreSQL psycopg closed its pooled connection
    with a warning, on every download."""
    import logging
    import time

    if backend != "postgresql":
        pytest.skip("SQLite's inline query is not cancelled midway: nothing to see there")

    ok(http.post("/orders", json=order_body(org.member_email)))
    report_id = api.create_report(request()).report.id
    work()
    url = status_of(api, report_id)[1].url
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            response, rows = download(url)
            assert response.status_code == 200 and len(rows) == 2
            assert int(response.headers["content-length"]) == len(response.content)
        time.sleep(0.5)  # a cancelled query is logged after the response
    assert not [r for r in caplog.records if "cancel" in r.getMessage().lower()], caplog.text
