"""The reward email writes an amount as the redemption page and the dashboard do: with the
currency's own decimals (none for JPY: "¥5,000", never "¥5,000.00")."""

from __future__ import annotations

import pytest

from largesse import codes
from largesse.delivery import compose
from largesse.money import CURRENCY_SYMBOLS, amount_in, decimals_for, format_money
from largesse.redemption import style
from tests.delivery.conftest import reward_row
from tests.factories import ok
from tests.yen_kit import yen_order_body, yen_org, yen_product


def _parts(message) -> tuple[str, str]:
    return message.get_body(("plain",)).get_content(), message.get_body(("html",)).get_content()


def test_a_yen_reward_email_has_no_decimals(engine, server, sink, fast, drain):
    org = yen_org(engine, server.url)
    product = yen_product(engine)
    with org.http() as http:
        order = ok(http.post("/orders", json=yen_order_body(org.member_email, product)))["order"]
        reward_id = order["rewards"][0]["id"]
        value = ok(http.get(f"/rewards/{reward_id}"))["reward"]["value"]
        assert value == {"denomination": 5000, "currency_code": "JPY"}
    drain(fast(smtp_url=sink.url))
    assert reward_row(engine, reward_id).delivery_status == "SUCCEEDED"
    [message] = sink.handler.to(org.member_email)
    assert message["Subject"] == "Yen Corp sent you a ¥5,000 reward"
    text, html = _parts(message)
    assert "Yen Corp sent you a reward of ¥5,000." in text
    assert "<strong>¥5,000</strong>" in html and "Redeem your ¥5,000 reward" in html
    for part in (message["Subject"], text, html):
        assert "5,000.00" not in part and "5000.00" not in part


def _mail(cents: int, currency: str) -> compose.RewardMail:
    return compose.RewardMail(reward_id="RW0000000001", recipient_name="Alex", recipient_email="alex@example.com",
                              denomination_cents=cents, currency_code=currency, expires_at=None, language="en",
                              delivery_meta=None, email_style=None, webpage_style=None, field_values={},
                              organization_name="Acme")


@pytest.mark.parametrize(("cents", "currency", "shown"), [
    (2500, "USD", "$25.00"),  # as before
    (123456789, "EUR", "€1,234,567.89"),
    (1050, "GBP", "£10.50"),
    (500000, "JPY", "¥5,000"),
    (500000, "KRW", "5,000 KRW"),
    (100, "CLP", "1 CLP"),
    (1200, "SEK", "12.00 SEK"),
    (310, "CAD", "CA$3.10"),  # the page's symbol table, now the email's too
    (2500, "KWD", "25.00 KWD"),  # stored and entered in hundredths (decimals_for): 2 decimals shown
])
def test_the_email_and_the_page_write_an_amount_alike(cents, currency, shown):
    assert format_money(cents, currency) == shown
    assert style.format_money(cents, currency) == shown  # the redemption and connected pages
    rendered = compose.render(_mail(cents, currency), link="https://example.com/redeem/x", mail_from_name="L")
    assert rendered.subject == f"Acme sent you a {shown} reward"
    assert f"sent you a reward of {shown}." in rendered.text and f"<strong>{shown}</strong>" in rendered.html


def test_negative_amounts_keep_their_sign_in_front():
    assert format_money(-310, "USD") == "-$3.10" and format_money(-500000, "JPY") == "-¥5,000"
    assert format_money(-1200, "SEK") == "-12.00 SEK"


def test_every_currency_has_the_dashboards_number():
    """In every currency of the API the number is the dashboard's (amount_in, grouped): the
    currency's decimals from decimals_for, one symbol table for the email and the pages."""
    for currency in sorted(codes.CURRENCIES):
        for cents in (0, 100, 500000, 123456700):
            number = amount_in(cents, currency, grouped=True)
            symbol = CURRENCY_SYMBOLS.get(currency)
            assert format_money(cents, currency) == (f"{symbol}{number}" if symbol else f"{number} {currency}")
            if decimals_for(currency) == 0:
                assert "." not in number


def test_the_email_fits_a_phone_and_marks_its_languages(browser):
    """A long link in the message, a long name or a tall logo made the email wider than a phone
    (627 px at 390: the Redeem button cut off). Only the sender's copy is in the reward's
    `language` (the template's own words are English), each paragraph in its own direction."""
    from dataclasses import replace

    link_text = "https://intranet.example.com/hr/recognition/2026/q4/announcements/employee?id=123456789&ref=email"
    mail = replace(_mail(2500, "USD"), language="ar", recipient_name="N" * 200, email_style={
        "logo_image_url": "https://example.com/logo.png", "logo_image_height_px": 400},
        delivery_meta={"message": f"Read it: {link_text}\n\nشكرا لعملك الرائع!"})
    rendered = compose.render(mail, link="https://example.com/redeem/x", mail_from_name="L")
    assert '<html lang="en">' in rendered.html
    assert '<p style="margin:0 0 16px 0;" lang="ar" dir="auto">شكرا لعملك الرائع!</p>' in rendered.html
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        page.route("**/*", lambda route: route.abort())  # the logo's host: nothing leaves the machine
        page.set_content(rendered.html)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert page.evaluate("document.querySelector('img').getAttribute('height')") == "160"
    finally:
        context.close()
