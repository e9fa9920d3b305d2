"""The dashboard's form limits, over HTTP: too many fields or parts, nested multipart, a body
over its route's size: 400/413 with the dashboard's message page, never a 500, never an ERROR
log. And the CSV preview: the custom-field values one file may hold, and its placement
checking the order once (not a preview, then the same checks again to place it)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from largesse import db
from largesse.dashboard import forms
from largesse.dashboard.models import uploads
from largesse.dashboard.pages import send
from largesse.orders import service as orders_service
from tests.conftest import order_body
from tests.dashboard.conftest import csrf_of, page_client, text_of
from tests.dashboard.test_pages import post, upload
from tests.factories import CHARITY_USD, GIFT_CARD_USD, available_cents, make_field, ok
from tests.redemption import test_form_limits as redemption_limits

MULTIPART = "multipart/form-data; boundary={}"
error_logs = redemption_limits.error_logs  # the fixture: ERROR records of the app's loggers


@pytest.fixture
def anonymous(server):
    """A browser on the sign-in page: it holds the dashboard's CSRF cookie, and the token."""
    client = page_client(server.url)
    page = client.get("/dashboard/signin")
    assert page.status_code == 200
    client.csrf = csrf_of(page.text)
    yield client
    client.close()


def part(name: str, value: bytes | str, *, boundary: str = "b0", headers: str = "") -> bytes:
    value = value.encode() if isinstance(value, str) else value
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n{headers}\r\n'
    return head.encode() + value + b"\r\n"


def multipart(*parts: bytes, boundary: str = "b0") -> bytes:
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def nested(depth: int) -> bytes:
    """Multipart in multipart, `depth` levels: boundary b0 holds a part of boundary b1, ..."""
    head = b"".join(b"--b%d\r\nContent-Type: multipart/form-data; boundary=b%d\r\n\r\n" % (i, i + 1)
                    for i in range(depth))
    return head + b"".join(b"\r\n--b%d--" % i for i in reversed(range(depth + 1)))


def refused_page(response, status: int, words: str) -> str:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    assert "content-security-policy" in response.headers
    text = text_of(response.text)
    assert words in text, text
    return text


def test_too_many_urlencoded_fields_is_a_400_page(anonymous, error_logs):
    data = {"csrf_token": anonymous.csrf, "email": "someone@example.com",
            **{f"f{i}": "1" for i in range(forms.MAX_FIELDS + 100)}}
    refused_page(anonymous.post("/dashboard/signin", data=data), 400, "The form has too many fields")
    # At the limit the form is read as before (the sign-in page's usual answer).
    data = {"csrf_token": anonymous.csrf, "email": "someone@example.com",
            **{f"f{i}": "1" for i in range(forms.MAX_FIELDS - 2)}}
    assert anonymous.post("/dashboard/signin", data=data).status_code == 200
    assert not error_logs, [r.getMessage() for r in error_logs]


def test_multipart_parts_are_counted_before_any_is_read(anonymous, error_logs):
    token = part("csrf_token", anonymous.csrf)
    email = part("email", "someone@example.com")
    filler = [part("a", "x") for _ in range(forms.MAX_PARTS - 2)]
    at_limit = anonymous.post("/dashboard/signin", content=multipart(token, email, *filler),
                              headers={"Content-Type": MULTIPART.format("b0")})
    assert at_limit.status_code == 200, text_of(at_limit.text)
    over = anonymous.post("/dashboard/signin", content=multipart(token, email, *filler, part("a", "x")),
                          headers={"Content-Type": MULTIPART.format("b0")})
    refused_page(over, 400, "The form has too many fields")
    # The audit's body, 14,500 tiny parts (~860 KB), is over the sign-in page's 64 KB: 413 unread.
    audit = multipart(*[part("a", "x") for _ in range(14_500)])
    refused_page(anonymous.post("/dashboard/signin", content=audit, headers={"Content-Type": MULTIPART.format("b0")}),
                 413, "The form is larger than 64 KB")
    assert not error_logs, [r.getMessage() for r in error_logs]


def test_nested_multipart_is_refused_at_the_first_level(anonymous, member_client, error_logs):
    # An inner body that is not even multipart: refused for being a multipart part, never parsed.
    inner = part("csrf_token", anonymous.csrf, headers="Content-Type: multipart/form-data; boundary=zz\r\n")
    refused_page(anonymous.post("/dashboard/signin", content=multipart(part("csrf_token", anonymous.csrf), inner),
                                headers={"Content-Type": MULTIPART.format("b0")}),
                 400, "A part of it is itself multipart")
    refused_page(anonymous.post("/dashboard/signin", content=nested(500),
                                headers={"Content-Type": MULTIPART.format("b0")}),
                 400, "A part of it is itself multipart")
    # 10,000 levels (~730 KB: it fits the upload's limit) on the CSV upload of a signed-in member.
    member_client.get("/dashboard/send/bulk")
    body = nested(10_000)
    assert len(body) < forms.MAX_UPLOAD_BYTES
    refused_page(member_client.post("/dashboard/send/bulk", content=body,
                                    headers={"Content-Type": MULTIPART.format("b0")}),
                 400, "A part of it is itself multipart")
    assert not error_logs, [r.getMessage() for r in error_logs]


def test_the_upload_takes_one_file_within_its_size(member_client, error_logs):
    page = member_client.get("/dashboard/send/bulk")
    files = [("file", ("a.csv", b"name,email,amount\n", "text/csv")),
             ("file", ("b.csv", b"name,email,amount\n", "text/csv"))]
    two = member_client.post("/dashboard/send/bulk", data={"csrf_token": csrf_of(page.text)}, files=files)
    refused_page(two, 400, "more files than it takes")
    big = b"name,email,amount\n" + b"x" * (forms.MAX_UPLOAD_BYTES + forms.OVERHEAD)
    text = refused_page(member_client.post("/dashboard/send/bulk", data={"csrf_token": csrf_of(page.text)},
                                           files={"file": ("big.csv", big, "text/csv")}),
                        413, "The file is larger than the 900 KB one upload can be")
    assert "Split it into smaller files" in text and "send it again" not in text, text
    # Over the app's 1 MB body limit, refused before the dashboard reads it: the same page, not
    # the API's JSON error body.
    huge = b"name,email,amount\n" + b"x" * 2_000_000
    text = refused_page(member_client.post("/dashboard/send/bulk", data={"csrf_token": csrf_of(page.text)},
                                           files={"file": ("huge.csv", huge, "text/csv")}),
                        413, "Split it into smaller files")
    # Only the upload takes a multipart body that large: other forms keep their 64 KB.
    refused_page(member_client.post("/dashboard/send", data={"csrf_token": csrf_of(page.text)},
                                    files={"file": ("a.csv", b"x" * 70_000, "text/csv")}),
                 413, "The form is larger than 64 KB")
    assert not error_logs, [r.getMessage() for r in error_logs]


def test_a_value_too_long_or_with_a_nul_is_refused_never_cut(admin, http, org, error_logs):
    """The form takes what was sent or refuses it: a 5,001-character message or a 201-character
    name was cut to 5,000 and 200 characters and sent; a NUL in a webhook URL was dropped, which
    saved another URL than the one typed (the API refuses both)."""
    before = ok(http.get("/orders"))["total_count"]
    base = {"name": "Recipient", "email": org.member_email, "amount": "25", "products": GIFT_CARD_USD}
    refused_page(post(admin, "/dashboard/send", "/dashboard/send", {**base, "message": "m" * 5001}),
                 400, "The field message is longer than 5000 characters.")
    refused_page(post(admin, "/dashboard/send", "/dashboard/send", {**base, "name": "n" * 201}),
                 400, "The field name is longer than 200 characters.")
    assert ok(http.get("/orders"))["total_count"] == before
    # At the limits, the values go through whole.
    summary = post(admin, "/dashboard/send", "/dashboard/send", {**base, "message": "m" * 5000, "name": "n" * 200})
    assert summary.status_code == 200 and "Check and send" in summary.text, text_of(summary.text)
    refused_page(post(admin, "/dashboard/developers", "/dashboard/developers/webhook",
                      {"url": "http://127.0.0.1:9/ho\x00ok"}), 400, "The field url holds a NUL character")
    assert ok(http.get("/webhooks"))["webhooks"] == []
    assert not error_logs, [r.getMessage() for r in error_logs]


def test_a_form_is_not_parsed_without_its_cookies(server, error_logs):
    """No CSRF cookie: the 403 page whatever the form says (it is not read); no session on a
    page that needs one: the sign-in redirect."""
    with page_client(server.url) as client:
        junk = {f"f{i}": "1" for i in range(forms.MAX_FIELDS + 100)}
        assert client.post("/dashboard/signin", data=junk).status_code == 403
        client.get("/dashboard/signin")
        response = client.post("/dashboard/send", data=junk)
        assert response.status_code == 303 and "/dashboard/signin?next=" in response.headers["location"]
    assert not error_logs


def test_an_upload_in_a_browser_s_shape_still_reads(admin, http, org, engine):
    """A browser's multipart: a non-ASCII file name, several products, the usual choices."""
    field = make_field(http, options=("Sales", "Support"), name="Team")
    page = admin.get("/dashboard/send/bulk")
    content = f"name,email,amount,Team\nAda,{org.member_email},20,Sales\n".encode()
    response = admin.post("/dashboard/send/bulk", files={"file": ("Prämien ;2026.csv", content, "text/csv")},
                          data={"csrf_token": csrf_of(page.text), "products": [GIFT_CARD_USD, CHARITY_USD],
                                "method": "EMAIL", "currency": "USD", "campaign": "",
                                "message": "Thanks\r\n– the team"})
    assert response.status_code == 303, text_of(response.text)
    upload_id = response.headers["location"].rsplit("/", 1)[1]
    with db.read(engine) as conn:
        stored = conn.execute(select(uploads).where(uploads.c.id == upload_id)).one()
    assert stored.filename == "Prämien ;2026.csv" and stored.content == content.decode()
    assert stored.options["products"] == [GIFT_CARD_USD, CHARITY_USD]
    assert stored.options["message"] == "Thanks\r\n– the team" and stored.options["method"] == "EMAIL"
    preview = text_of(admin.get(response.headers["location"]).text)
    assert "Place order of 1 reward" in preview
    placed = post(admin, response.headers["location"], response.headers["location"], {})
    order = ok(http.get(f"/orders/{placed.headers['location'].rsplit('/', 1)[1]}"))["order"]
    assert order["rewards"][0]["custom_fields"][0]["id"] == field["id"]


# --- the CSV preview's cost ---------------------------------------------------------------------

def _text_fields(http, count: int) -> list[str]:
    return [make_field(http, data_type="Text", options=None)["label"] for _ in range(count)]


def _csv(email: str, labels: list[str], rows: int) -> str:
    return ("name,email,amount," + ",".join(labels) + "\n"
            + "".join(f"P{i},{email},1" + ",x" * len(labels) + "\n" for i in range(rows)))


def test_a_file_over_the_custom_field_values_checked_is_refused_at_upload(member_client, http, org):
    labels = _text_fields(http, 10)
    rows = send.MAX_FIELD_VALUES // 10
    over = upload(member_client, _csv(org.member_email, labels, rows + 1), products=CHARITY_USD)
    text = refused_page(over, 400, f"The file has {(rows + 1) * 10:,} custom-field values")
    assert f"at most {send.MAX_FIELD_VALUES:,}" in text and f"files of at most {rows:,} rows" in text
    at_limit = upload(member_client, _csv(org.member_email, labels, rows), products=CHARITY_USD)
    assert at_limit.status_code == 303
    preview = text_of(member_client.get(at_limit.headers["location"]).text)
    assert f"Place order of {rows} rewards" in preview


def test_fields_added_after_the_upload_count_on_its_preview(member_client, http, org):
    """An upload whose columns became custom fields since (or stored before the limit): its
    preview says why it is not checked, and placing it places nothing."""
    labels = [f"later_{i}" for i in range(10)]
    rows = send.MAX_FIELD_VALUES // 10 + 1
    location = upload(member_client, _csv(org.member_email, labels, rows), products=CHARITY_USD).headers["location"]
    for label in labels:
        make_field(http, data_type="Text", options=None, name=label)
    preview = member_client.get(location)
    assert preview.status_code == 200
    text = text_of(preview.text)
    assert f"The file has {rows * 10:,} custom-field values" in text and "Place order" not in text
    placed = post(member_client, location, location, {})
    assert placed.status_code == 303 and placed.headers["location"] == location
    assert ok(http.get("/orders"))["total_count"] == 0


def test_placing_a_file_checks_the_order_once(member_client, http, org, monkeypatch):
    """The POST places the order, which runs every check the preview runs: no preview first."""
    labels = _text_fields(http, 2)
    location = upload(member_client, _csv(org.member_email, labels, 20), products=CHARITY_USD).headers["location"]
    page = member_client.get(location)
    assert "Place order of 20 rewards" in text_of(page.text)
    previews = []
    real = orders_service.preview_order_as_member
    monkeypatch.setattr(orders_service, "preview_order_as_member",
                        lambda *args, **kwargs: previews.append(1) or real(*args, **kwargs))
    placed = member_client.post(location, data={"csrf_token": csrf_of(page.text)})
    assert placed.status_code == 303 and "/dashboard/orders/" in placed.headers["location"]
    assert previews == []
    assert len(ok(http.get("/orders"))["orders"][0]["rewards"]) == 20


def test_a_refused_placement_is_explained_with_the_preview(member_client, http, org):
    """The balance spent between the preview and "Place order": the order's refusal, with the
    preview's figures (computed then), as before."""
    location = upload(member_client, _csv(org.member_email, [], 3), products=CHARITY_USD).headers["location"]
    page = member_client.get(location)
    assert "Place order of 3 rewards" in text_of(page.text)
    spend = available_cents(http) - 200  # 2.00 USD left: the file's 3 rewards of 1.00 no longer fit
    ok(http.post("/orders", json=order_body(org.member_email, denomination=spend / 100, products=(CHARITY_USD,))))
    response = member_client.post(location, data={"csrf_token": csrf_of(page.text)})
    text = refused_page(response, 402, "Balance: insufficient funds")
    assert "Total 3.00 USD" in text and "Available balance 2.00 USD" in text
    assert ok(http.get("/orders"))["total_count"] == 1
