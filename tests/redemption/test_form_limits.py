"""The redemption and connect pages' forms, over HTTP: too many fields or too large a body is
a 400/413 page (the pages' own, in HTML), never a 500 nor an ERROR log; the link still works."""

from __future__ import annotations

import logging

import httpx
import pytest

from largesse.connected import pages as connect_pages
from largesse.redemption import endpoints
from tests.connected.test_connected import _confirm, _connected, _member, _session
from tests.redemption.conftest import GIFT_CARD, csrf_of, link_reward, page_client


@pytest.fixture
def error_logs():
    """ERROR records of the app's loggers ("largesse" does not propagate when configured)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(logging.ERROR)
    loggers = [logging.getLogger(), logging.getLogger("largesse"), logging.getLogger("uvicorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    yield records
    for logger in loggers:
        logger.removeHandler(handler)


def _html(response, status: int, words: str) -> None:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    assert "content-security-policy" in response.headers
    assert words in response.text, response.text


def test_a_redemption_form_with_too_many_fields_is_a_400_page(org, error_logs):
    _, link = link_reward(org)
    with page_client() as client:
        page = client.get(link)
        token = csrf_of(page.text)
        crowded = {"csrf_token": token, "product_id": GIFT_CARD,
                   **{f"f{i}": "1" for i in range(endpoints.MAX_FIELDS)}}
        refused = client.post(link, data=crowded)
        _html(refused, 400, "Your choice could not be read")
        assert "Acme" in refused.text  # the sender's page, as the link's other refusals
        _html(client.post(link, data={"csrf_token": token, "product_id": "x" * endpoints.MAX_FORM_BYTES}),
              413, "The form was too large")
        # Over the server's own limit (1 MB, refused before any route): the page too, not the API's JSON.
        _html(client.post(link, data={"csrf_token": token, "product_id": "x" * 3_000_000}),
              413, "The form was too large")
        # Nothing was spent: the same form, within the limits, redeems.
        done = client.post(link, data={"csrf_token": token, "product_id": GIFT_CARD})
        assert done.status_code == 303, done.text
        # Any token: the form is refused before the link is looked up.
        _html(client.post(f"{org.base_url}/redeem/not-a-real-token", data=crowded), 400,
              "Your choice could not be read")
    assert not error_logs, [r.getMessage() for r in error_logs]


def test_a_connect_form_with_too_many_fields_is_a_400_page(org, api, error_logs):
    session = _session(api, _member(api, _connected(api).id).id)
    with httpx.Client(base_url=org.base_url) as browser:
        action, token = _confirm(browser, session.url)
        crowded = {"csrf_token": token, **{f"f{i}": "1" for i in range(connect_pages.MAX_FIELDS)}}
        _html(browser.post(action, data=crowded), 400, "The sign-in form could not be read")
        _html(browser.post(action, data={"csrf_token": token, "x": "x" * connect_pages.MAX_FORM_BYTES}),
              413, "The sign-in form was too large")
        _html(browser.post(action, data={"csrf_token": token, "x": "x" * 3_000_000}),
              413, "The sign-in form was too large")
        _html(browser.post("/connect/not-a-real-token", data=crowded), 400, "The sign-in form could not be read")
        # The link was not spent: within the limits it signs in.
        signed_in = browser.post(action, data={"csrf_token": token})
        assert signed_in.status_code == 200 and "Signed in to" in signed_in.text, signed_in.text
    assert not error_logs, [r.getMessage() for r in error_logs]
