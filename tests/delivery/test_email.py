"""Order -> job -> worker -> email, through a real SMTP server or a Maildir."""

from __future__ import annotations

import mailbox
import re

from tests.conftest import order_body
from tests.delivery.conftest import Sink, job_rows, reward_row, set_job, tagged, wait_for
from tests.factories import error, make_campaign, make_field, ok, place


def _order(http, email: str, **extra) -> str:
    return place(http, email, **extra)["rewards"][0]["id"]


def _parts(message):
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    return text, html


def test_smtp_multipart_with_campaign_copy_placeholders_and_escaping(org, http, sink, fast, drain, engine):
    field = make_field(http, name="Department", options=("R&D <Lab>", "Sales"))
    campaign = make_campaign(
        http, email_style={"sender_name": "Acme People", "subject_line": "Ignored: meta wins",
                           "button_color": "#ff6600", "logo_image_url": "https://cdn.example.com/logo.png"},
        webpage_style={"headline": "Thank you, {{ Department }}!"})
    meta = {"subject_line": "A gift for {{ department }} from {{ Nobody }}",
            "message": "<b>Well done</b> team {{Department}}.\n\nSee you soon."}
    reward_id = _order(http, org.member_email, campaign_id=campaign["id"], products=None,
                       custom_fields=[{"id": field["id"], "value": "R&D <Lab>"}],
                       delivery={"method": "EMAIL", "meta": meta})
    assert reward_row(engine, reward_id).delivery_status == "PENDING"

    drain(fast(smtp_url=sink.url))

    [message] = sink.handler.to(org.member_email)
    assert message["Subject"] == "A gift for R&D <Lab> from {{ Nobody }}"
    assert message["From"].addresses[0].display_name == "Acme People"
    assert message["X-Largesse-Reward-Id"] == reward_id
    text, html = _parts(message)
    assert "<b>Well done</b> team R&D <Lab>." in text and "$25.00" in text
    assert "&lt;b&gt;Well done&lt;/b&gt; team R&amp;D &lt;Lab&gt;." in html
    assert "<b>Well done" not in html and "Thank you, R&amp;D &lt;Lab&gt;!" in html
    assert "background:#ff6600" in html and 'src="https://cdn.example.com/logo.png"' in html
    links = re.findall(r"https?://\S+/redeem/[A-Za-z0-9_-]+", text)
    assert links and f'href="{links[0]}"' in html
    row = reward_row(engine, reward_id)
    assert row.delivery_status == "SUCCEEDED" and row.delivered_at is not None
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["delivery"]["status"] == "SUCCEEDED"
    assert [j.status for j in job_rows(engine, reward_id)] == ["done"]

    drain(fast(smtp_url=sink.url))  # nothing left to do: no second email
    assert len(sink.handler.to(org.member_email)) == 1


def test_the_senders_message_carries_the_rewards_language(org, http, sink, fast, drain):
    """The reward's `language` (pt-BR) marks the sender's message in the email it was sent
    (docs/delivery.md); the template's own words stay English."""
    _order(http, org.member_email, language="pt-BR", delivery={"method": "EMAIL", "meta": {"message": "Obrigado!"}})
    drain(fast(smtp_url=sink.url))
    [message] = sink.handler.to(org.member_email)
    _, html = _parts(message)
    assert '<html lang="en">' in html and re.search(r'<p [^>]*lang="pt-BR" dir="auto">Obrigado!</p>', html)


def test_placeholders_name_labels_of_any_script(org, http, sink, fast, drain):
    """{{ Größe }} and {{ 部署 }} are filled as {{ Department }} is (they stayed as written: the
    placeholder pattern took ASCII labels only), case-insensitively and with spaces folded."""
    size = make_field(http, name="Größe", data_type="Text", options=None)
    team = make_field(http, name="部署 名", data_type="Text", options=None)
    meta = {"subject_line": "Size {{ größe }}", "message": "Team {{部署  名}}, size {{ GRÖSSE }}, {{ Nobody }}."}
    values = [{"id": size["id"], "value": "XL"}, {"id": team["id"], "value": "営業"}]
    _order(http, org.member_email, custom_fields=values, delivery={"method": "EMAIL", "meta": meta})
    drain(fast(smtp_url=sink.url))
    [message] = sink.handler.to(org.member_email)
    assert message["Subject"] == "Size XL"
    text, _ = _parts(message)
    assert "Team 営業, size XL, {{ Nobody }}." in text


def test_labels_that_differ_only_in_case_are_two_placeholders(org, http, sink, fast, drain):
    """`Team` and `team` are two fields (labels are unique as written): each placeholder shows its
    own field's value, and {{ TEAM }}, which both match ignoring case, stays as written (it showed
    whichever value came last, even one the reward did not have)."""
    upper = make_field(http, name="Team", data_type="Text", options=None)
    lower = make_field(http, name="team", data_type="Text", options=None)
    meta = {"subject_line": "{{ Team }}/{{ team }}", "message": "X1={{ Team }} X2={{ team }} X3={{ TEAM }}."}
    values = [{"id": upper["id"], "value": "UPPER"}, {"id": lower["id"], "value": "lower"}]
    _order(http, org.member_email, custom_fields=values, delivery={"method": "EMAIL", "meta": meta})
    only_lower = _order(http, org.member_email, custom_fields=values[1:],
                        delivery={"method": "EMAIL", "meta": {**meta, "subject_line": "only {{ Team }}"}})
    drain(fast(smtp_url=sink.url))
    both, single = sorted(sink.handler.to(org.member_email), key=lambda m: m["Subject"].startswith("only"))
    assert both["Subject"] == "UPPER/lower" and "X1=UPPER X2=lower X3={{ TEAM }}." in _parts(both)[0]
    assert single["X-Largesse-Reward-Id"] == only_lower and single["Subject"] == "only"
    assert "X1= X2=lower" in _parts(single)[0]


def test_maildir_when_no_smtp_url(org, http, fast, drain, engine, tmp_path):
    reward_id = _order(http, org.member_email)
    drain(fast(smtp_url=None, mail_dir=str(tmp_path / "mail")))
    box = mailbox.Maildir(str(tmp_path / "mail"), create=False)
    mine = [m for m in box if m["X-Largesse-Reward-Id"] == reward_id]
    assert len(mine) == 1 and mine[0]["To"].endswith(f"<{org.member_email}>")
    assert mine[0].is_multipart()
    assert reward_row(engine, reward_id).delivery_status == "SUCCEEDED"


def test_default_sender_is_the_organization_as_on_the_page(org, http, sink, fast, drain):
    """Neither the order nor a campaign names a sender: the email, like the redemption page and
    the dashboard's preview, names the organization (Acme), not the server's mail_from_name."""
    _order(http, org.member_email)
    drain(fast(smtp_url=sink.url))
    [message] = sink.handler.to(org.member_email)
    assert message["From"].addresses[0].display_name == "Acme"
    assert message["Subject"] == "Acme sent you a $25.00 reward"


def test_email_reads_on_a_phone_and_on_any_button_colour(org, http, sink, fast, drain):
    """The card shrinks to the screen (no fixed 560 px), and the button's label takes the colour
    that reads on the campaign's button (dark on yellow, as the redemption page does)."""
    yellow = make_campaign(http, email_style={"button_color": "#FFEE00"})
    _order(http, org.member_email, campaign_id=yellow["id"], products=None)
    drain(fast(smtp_url=sink.url))
    [message] = sink.handler.to(org.member_email)
    _, html = _parts(message)
    assert 'width="560"' not in html and "width:100%;max-width:560px" in html
    assert "background:#FFEE00;color:#14171f;" in html


def test_smtp_down_then_back_retries_then_succeeds(org, http, fast, engine):
    down = Sink()  # a free port with nobody listening yet
    # Retries half a second apart: one drain (which also runs what falls due while it runs)
    # must not spend all eight attempts on a loaded machine before the first look.
    settings = fast(smtp_url=down.url, smtp_timeout_seconds=2.0, job_retry_base_seconds=0.5,
                    job_retry_max_seconds=1.0)
    reward_id = _order(http, org.member_email)
    wait_for(lambda: job_rows(engine, reward_id)[0].attempts >= 2, settings=settings, engine=engine)
    job = job_rows(engine, reward_id)[0]
    assert job.status == "queued" and "unavailable" in job.last_error
    assert reward_row(engine, reward_id).delivery_status == "PENDING"
    down.start()
    try:
        wait_for(lambda: reward_row(engine, reward_id).delivery_status == "SUCCEEDED", settings=settings,
                 engine=engine)
        assert len(down.handler.to(org.member_email)) == 1
    finally:
        down.stop()


def test_smtp_550_fails_then_resend_to_updated_email(org, http, api, sink, fast, drain, engine):
    from tremendous import ResendRewardRequest
    from tremendous.exceptions import UnprocessableEntityException

    bad = tagged(org.member_email, "nobody")
    reward_id = _order(http, bad)
    settings = fast(smtp_url=sink.url)
    drain(settings)
    row = reward_row(engine, reward_id)
    assert row.delivery_status == "FAILED" and "550" in row.delivery_error
    assert [(j.status, j.attempts) for j in job_rows(engine, reward_id)] == [("dead", 1)]
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["delivery"]["status"] == "FAILED"

    outsider = error(http.post(f"/rewards/{reward_id}/resend", json={"updated_email": "stranger@example.org"}), 422)
    assert "updated_email" in outsider["payload"]
    both = {"updated_email": org.member_email, "updated_phone": "+14155550100"}
    error(http.post(f"/rewards/{reward_id}/resend", json=both), 422)

    assert api.resend_reward(reward_id, ResendRewardRequest(updated_email=org.member_email)) == {}
    assert reward_row(engine, reward_id).delivery_status == "PENDING"
    try:
        api.resend_reward(reward_id)  # not FAILED any more
        raise AssertionError("expected 422")
    except UnprocessableEntityException as exc:
        assert exc.data.errors.message
    drain(settings)
    row = reward_row(engine, reward_id)
    assert row.delivery_status == "SUCCEEDED" and row.recipient_email == org.member_email
    assert len(sink.handler.to(org.member_email)) == 1 and not sink.handler.to(bad)


def test_resend_accepts_an_empty_json_body(org, http, sink, fast, drain, engine):
    reward_id = _order(http, tagged(org.member_email, "fail"))
    drain(fast(smtp_url=sink.url))
    assert reward_row(engine, reward_id).delivery_status == "FAILED"
    response = http.post(f"/rewards/{reward_id}/resend", content=b"", headers={"Content-Type": "application/json"})
    assert ok(response) == {}
    assert reward_row(engine, reward_id).delivery_status == "PENDING"
    error(http.post(f"/rewards/{reward_id}/resend", json={}), 422)  # already pending again


def test_sandbox_fail_and_tempfail_recipients(org, http, sink, fast, engine):
    settings = fast(smtp_url=sink.url)
    failing = _order(http, tagged(org.member_email, "fail"))
    flaky = _order(http, tagged(org.member_email, "tempfail"))
    wait_for(lambda: reward_row(engine, flaky).delivery_status == "SUCCEEDED", settings=settings, engine=engine)
    assert [j.attempts for j in job_rows(engine, flaky)] == [3]
    assert len(sink.handler.to(tagged(org.member_email, "tempfail"))) == 1
    row = reward_row(engine, failing)
    assert row.delivery_status == "FAILED" and "+fail" in row.delivery_error
    assert [(j.status, j.attempts) for j in job_rows(engine, failing)] == [("dead", 1)]
    assert not sink.handler.to(tagged(org.member_email, "fail"))


def test_exhausted_retries_become_dead_and_cli_retries_them(org, http, sink, fast, engine, cli):
    settings = fast(smtp_url=sink.url)
    reward_id = _order(http, tagged(org.member_email, "busy"))
    set_job(engine, reward_id, max_attempts=2)
    wait_for(lambda: job_rows(engine, reward_id)[0].status == "dead", settings=settings, engine=engine)
    row = reward_row(engine, reward_id)
    assert row.delivery_status == "FAILED" and "451" in row.delivery_error
    job_id = job_rows(engine, reward_id)[0].id
    listed = cli("jobs", "list", "--status", "dead", "--limit", "500").stdout
    assert f"{reward_id}" in listed and str(job_id) in listed
    assert "requeued 1 job" in cli("jobs", "retry", str(job_id)).stdout
    assert reward_row(engine, reward_id).delivery_status == "PENDING"
    job = job_rows(engine, reward_id)[0]
    assert (job.status, job.attempts) == ("queued", 0)
    assert cli("jobs", "retry", str(job_id), check=False).returncode != 0  # not dead any more


def test_phone_rewards_fail_clearly_without_sms(org, make_server, fast, drain, engine, sink):
    server = make_server(sms_url="https://sms.example.invalid/send")
    with org.http() as client:
        client.base_url = f"{server.url}/api/v2"
        body = order_body(org.member_email, method="PHONE")
        body["reward"]["recipient"]["phone"] = "+14155550100"
        reward_id = ok(client.post("/orders", json=body))["order"]["rewards"][0]["id"]
    drain(fast(smtp_url=sink.url, sms_url="https://sms.example.invalid/send"))
    row = reward_row(engine, reward_id)
    assert row.delivery_status == "FAILED" and "not implemented" in row.delivery_error
    assert not sink.handler.to(org.member_email)


def test_serve_runs_the_worker_in_process(org, make_server, fast, sink, engine):
    settings = fast(smtp_url=sink.url)
    server = make_server(run_worker=True, smtp_url=sink.url, worker_poll_seconds=0.05,
                         worker_concurrency=settings.worker_concurrency)
    with org.http() as client:
        client.base_url = f"{server.url}/api/v2"
        reward_id = ok(client.post("/orders", json=order_body(org.member_email)))["order"]["rewards"][0]["id"]
        wait_for(lambda: ok(client.get(f"/rewards/{reward_id}"))["reward"]["delivery"]["status"] == "SUCCEEDED")
    assert len(sink.handler.to(org.member_email)) == 1


def test_a_recipient_whose_local_part_is_not_ascii_gets_the_email(prod_org, fast, drain, engine):
    """Production accepts zoë@… (RFC 6531) and charges for it: the email goes out with SMTPUTF8
    (it failed for good at its first attempt, "cannot build the message")."""
    address = "zoë.müller@example.com"
    with prod_org.http() as prod:
        reward_id = _order(prod, address)
    utf8 = Sink(smtputf8=True).start()
    try:
        drain(fast(smtp_url=utf8.url, environment="production", public_url=prod_org.base_url))
        [message] = utf8.handler.to(address)  # the envelope's recipient, as the relay read it
    finally:
        utf8.stop()
    assert "/redeem/" in message.get_body(("plain",)).get_content()
    assert reward_row(engine, reward_id).delivery_status == "SUCCEEDED"
