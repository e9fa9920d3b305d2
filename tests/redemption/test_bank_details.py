"""A product that pays into a bank account asks for the account before it pays (HTTP and browser)."""

from __future__ import annotations

import logging
import re

import pytest
from sqlalchemy import func, select

from largesse import db
from largesse.redemption.models import payouts
from tests.redemption.conftest import GIFT_CARD, csrf_of, link_reward, page_client

BANK = "PCSBANKACH01US"
ROUTING = "021000021"  # a valid ABA routing number (checksum 30)
ACCOUNT = "000123456789"
VALID = {"holder_name": "Alex Recipient", "routing_number": ROUTING, "account_number": ACCOUNT,
         "account_type": "checking"}


def _payout(engine, reward_id: str):
    with db.read(engine) as conn:
        return conn.execute(select(payouts).where(payouts.c.reward_id == reward_id)).first()


def _count(engine, reward_id: str) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(func.count()).select_from(payouts).where(payouts.c.reward_id == reward_id)
                            ).scalar_one()


def test_the_bank_product_asks_for_the_account_with_labelled_fields(org):
    _, link = link_reward(org, products=(GIFT_CARD, BANK))
    with page_client() as client:
        page = client.get(link).text
    for name, label in (("holder_name", "Account holder name"), ("routing_number", "Routing number"),
                        ("account_number", "Account number"), ("account_type", "Account type")):
        field = re.search(rf'<(?:input|select)[^>]*name="{name}"[^>]*>', page)
        assert field, name
        field_id = re.search(r'id="([^"]+)"', field.group(0)).group(1)
        assert re.search(rf'<label for="{field_id}">{label}', page), label
    assert re.search(r'name="routing_number"[^>]*inputmode="numeric"', page)
    assert re.search(r'name="account_number"[^>]*inputmode="numeric"', page)
    assert re.search(r'name="holder_name"[^>]*autocomplete="name"', page)
    assert 'data-details="us_bank_account"' in page


def test_a_valid_account_is_sent_to_the_provider_and_only_its_last_digits_kept(org, engine, caplog):
    reward_id, link = link_reward(org, products=(GIFT_CARD, BANK))
    with caplog.at_level(logging.DEBUG), page_client() as client:
        token = csrf_of(client.get(link).text)
        done = client.post(link, data={"csrf_token": token, "product_id": BANK, **VALID})
        assert done.status_code == 303
        shown = client.get(link).text
    assert "Transfer of $25.00 via Direct Bank Deposit to the checking account ending 6789 recorded" in shown
    row = _payout(engine, reward_id)
    assert "ending 6789" in row.confirmation and ACCOUNT not in row.confirmation and ROUTING not in row.confirmation
    stored = " ".join(str(v) for v in row._mapping.values())
    assert ACCOUNT not in stored and ROUTING not in stored
    assert ACCOUNT not in caplog.text and ROUTING not in caplog.text


@pytest.mark.parametrize(("field", "value", "error"), [
    ("holder_name", "", "Enter the name on the account"),
    ("holder_name", "x" * 101, "at most 100 characters"),
    ("holder_name", "Alex\x00Recipient", "letters, spaces and punctuation"),
    ("routing_number", "", "Enter the 9-digit routing number"),
    ("routing_number", "12345", "9 digits"),
    ("routing_number", "021000022", "not a valid routing number"),
    ("routing_number", "000000000", "not a valid routing number"),  # its check digits sum to 0
    ("routing_number", "500000002", "not a valid routing number"),  # no bank uses the prefix 50
    ("account_number", "", "Enter the account number"),
    ("account_number", "123", "4 to 17 digits"),
    ("account_number", "12345678901234567890", "4 to 17 digits"),
    ("account_number", "1234abcd", "4 to 17 digits"),
    ("account_type", "", "Choose checking or savings"),
    ("account_type", "brokerage", "Choose checking or savings"),
])
def test_each_invalid_field_is_a_400_naming_it_and_nothing_is_redeemed(org, engine, field, value, error):
    reward_id, link = link_reward(org, products=(GIFT_CARD, BANK))
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        wrong = client.post(link, data={"csrf_token": token, "product_id": BANK, **VALID, field: value})
        assert wrong.status_code == 400
        page = wrong.text
        assert 'role="alert"' in page and error in page
        tag = re.search(rf'<(?:input|select)[^>]*name="{field}"[^>]*>', page).group(0)
        assert 'aria-invalid="true"' in tag
        described = re.search(r'aria-describedby="([^"]+)"', tag).group(1).split()
        error_id = next(i for i in described if i.endswith("-error"))
        assert re.search(rf'id="{error_id}"[^>]*>[^<]*{re.escape(error)}', page)
        assert page.count('aria-invalid="true"') == 1  # only the field in error
        assert "autofocus" in tag and page.count("autofocus") == 1  # the page opens on it
        assert "<title>Error: " in page
        assert re.search(rf'value="{BANK}"[^>]*checked', page)  # the choice is kept
        if field != "holder_name":
            assert 'value="Alex Recipient"' in page  # the recipient's other inputs are kept
        assert ACCOUNT not in page  # the account number is never echoed
        assert client.get(link).status_code == 200 and 'type="radio"' in client.get(link).text
        again = client.post(link, data={"csrf_token": token, "product_id": BANK, **VALID})
        assert again.status_code == 303  # still redeemable, once
    assert _count(engine, reward_id) == 1


def test_spaces_and_dashes_in_numbers_are_accepted(org, engine):
    reward_id, link = link_reward(org, products=(BANK,))
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        done = client.post(link, data={"csrf_token": token, "product_id": BANK, **VALID,
                                       "routing_number": "0210 0002 1", "account_number": "0001-2345-6789",
                                       "account_type": "savings"})
        assert done.status_code == 303
    assert "savings account ending 6789" in _payout(engine, reward_id).confirmation


def test_digits_of_any_script_are_read_and_a_short_account_shows_two(org, engine):
    """A phone keyboard's fullwidth digits were "not 9 digits"; the last 4 digits of a 4-digit
    account are all of it, so a number shorter than 8 digits shows its last 2."""
    reward_id, link = link_reward(org, products=(BANK,))
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        done = client.post(link, data={"csrf_token": token, "product_id": BANK, **VALID,
                                       "routing_number": "０２１０００DASH０２１".replace("DASH", "-"),
                                       "account_number": "٩٨٧٦"})
        assert done.status_code == 303, done.text
    assert _payout(engine, reward_id).confirmation.split(" recorded")[0].endswith("checking account ending 76")


def test_a_product_that_needs_no_details_is_unchanged(org, engine):
    """A gift card chosen on a page that also offers the bank deposit needs no account fields."""
    reward_id, link = link_reward(org, products=(GIFT_CARD, BANK))
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        done = client.post(link, data={"csrf_token": token, "product_id": GIFT_CARD})
        assert done.status_code == 303
        assert "TEST-" in client.get(link).text
    assert _payout(engine, reward_id).confirmation is None


def test_the_catalog_says_which_products_need_details():
    from largesse.catalog.service import CatalogError, default_catalog, parse_catalog

    shipped = {row["id"]: row for row in default_catalog()}
    assert shipped[BANK]["recipient_details"] == "us_bank_account"
    assert [pid for pid, row in shipped.items() if row["recipient_details"]] == [BANK]
    product = {"id": "PCSIMPORTED01US", "name": "Bank", "category": "ach", "countries": ["US"],
               "skus": [{"min": 5, "max": 100, "currency_code": "USD"}]}
    assert parse_catalog({"products": [product]})[0]["recipient_details"] == "us_bank_account"  # ach's default
    assert parse_catalog({"products": [{**product, "recipient_details": None}]})[0]["recipient_details"] is None
    with pytest.raises(CatalogError, match="recipient_details must be"):
        parse_catalog({"products": [{**product, "recipient_details": "iban"}]})


def test_bank_deposit_by_keyboard_on_a_phone(org, browser_page):
    page = browser_page  # 390 x 844
    _, link = link_reward(org, products=(GIFT_CARD, BANK))
    page.goto(link)
    assert not page.get_by_label("Routing number").is_visible()  # only asked once the bank deposit is chosen
    page.keyboard.press("Tab")  # skip link
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.value") == GIFT_CARD
    page.keyboard.press("ArrowDown")
    assert page.get_by_role("radio", name="Direct Bank Deposit").is_checked()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "holder_name"
    page.keyboard.type("Alex Recipient")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "routing_number"
    page.keyboard.type(ROUTING)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "account_number"
    page.keyboard.type("123")  # too short: the page says so next to the field
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "account_type"
    page.keyboard.press("ArrowDown")  # a closed select changes with the arrows
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent").strip() == "Confirm my choice"
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.keyboard.press("Enter")
    page.wait_for_selector("[aria-invalid=true]")
    account = page.get_by_label("Account number")
    assert account.get_attribute("aria-invalid") == "true"
    assert "4 to 17 digits" in page.locator("#account_number-error").inner_text()
    assert page.get_by_label("Routing number").input_value() == ROUTING
    account.fill(ACCOUNT)
    account.press("Enter")  # Enter in a field submits the form
    page.wait_for_selector(".confirmation")
    assert "checking account ending 6789" in page.locator(".confirmation").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
