"""The second outside audit of the dashboard: each finding, as a person meets it over HTTP."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import update

from largesse import db
from largesse.orders.models import rewards
from largesse.timeutil import utcnow
from tests.dashboard.conftest import deliver_mail, page_client, signin_links, text_of
from tests.dashboard.test_pages import post, send_one, upload
from tests.factories import CHARITY_USD, GIFT_CARD_USD, make_campaign, make_field, many_rewards_body, ok, place
from tests.redemption.conftest import csrf_of as page_csrf
from tests.redemption.conftest import link_reward


def preview_of(client, content: str, **options) -> tuple[int, str]:
    response = upload(client, content, **options)
    assert response.status_code == 303, text_of(response.text)
    page = client.get(response.headers["location"])
    return page.status_code, text_of(page.text)


def test_a_file_of_more_than_5000_rows_says_so(admin, org):
    rows = "".join(f"Person {i},{org.member_email},1\n" for i in range(5001))
    status, text = preview_of(admin, "name,email,amount\n" + rows, products=CHARITY_USD)
    assert status == 200, text[:500]
    assert "The file has more than 5000 rows; split it into several files." in text
    assert "Place order" not in text


@pytest.mark.parametrize(("separator", "named"), [(";", "semicolons"), ("\t", "tabs")])
def test_a_file_separated_by_semicolons_or_tabs_says_so(admin, org, separator, named):
    """What a European spreadsheet saves as "CSV": the header reads as one column."""
    header, row = separator.join(("name", "email", "amount")), separator.join(("Ada", org.member_email, "20"))
    _, text = preview_of(admin, f"{header}\n{row}\n")
    assert f"The columns seem to be separated by {named}" in text, text
    assert "Place order" not in text


def test_a_file_placed_before_its_choices_counted_is_still_that_order(admin, http, org):
    """Orders placed by the earlier code are named by the file's bytes alone: the preview of
    such a file (uploads are kept a week) still says it went out, and "Place order" is that order."""
    import hashlib

    content = f"name,email,amount\nAda,{org.member_email},20\n"
    legacy = "dashboard-csv-" + hashlib.sha256(content.encode()).hexdigest()[:40]
    body = many_rewards_body(org.member_email, [20])
    body["external_id"] = legacy
    first = ok(http.post("/orders", json=body))["order"]["id"]
    location = upload(admin, content).headers["location"]
    text = text_of(admin.get(location).text)
    assert f"already sent as order {first}" in text and "perhaps with other products or message" in text, text
    assert post(admin, location, location, {}).headers["location"].endswith(first)
    assert ok(http.get("/orders"))["total_count"] == 1


def test_a_row_with_more_cells_than_the_header_is_refused(admin, org):
    email = org.member_email
    status, text = preview_of(admin, f"name,email,amount\nAda,{email},20\nCat,{email},7,5\n"
                                     f"Dan,{email},3,x,y\nEve,{email}\n")
    assert status == 200
    assert "3 rows cannot be sent" in text  # Cat and Dan (extra cells), Eve (no amount, as before)
    assert "this row has 4 cells but the header has 3: a comma in an amount? write 7.50, or quote the cell" in text
    assert "this row has 5 cells but the header has 3" in text
    assert "7.00 USD" not in text and "Place order" not in text
    # A trailing empty cell (a spreadsheet's habit) is not a problem.
    status, text = preview_of(admin, f"name,email,amount\nAda,{email},20,\n")
    assert "Place order of 1 reward" in text, text


def test_problems_are_named_by_the_forms_labels(admin, http, org):
    field = make_field(http, options=("Sales", "Support"), name="Department")
    base = {"name": "Ada", "email": org.member_email, "amount": "25", "products": GIFT_CARD_USD}
    cases = [({"amount": "0"}, "Amount: must be greater than 0"),
             ({"name": " "}, "Recipient name: "),
             ({f"field_{field['id']}": "Legal"}, "Department: must be one of: Sales, Support"),
             ({"products": ""}, "Products: ")]
    for change, expected in cases:
        response = send_one(admin, {**base, **change})
        text = text_of(response.text)
        assert response.status_code == 400 and expected in text, (change, text)
        for path in ("value.denomination", "recipient.", "custom_fields", "campaign_id", "products:"):
            assert path not in text, (change, path, text)
    empty = make_campaign(http, products=(), name="Empty one")  # the API allows it
    response = send_one(admin, {**base, "products": "", "campaign": empty["id"]})
    text = text_of(response.text)
    assert response.status_code == 400 and "Products: no products" in text and "products: no" not in text, text
    # The CSV preview says the same, the custom field by its label.
    _, text = preview_of(admin, f"name,email,amount,Department\nAda,{org.member_email},0,Legal\n")
    assert "Department: must be one of: Sales, Support" in text and "custom_fields" not in text, text
    # The campaign editor too.
    bad = post(admin, "/dashboard/campaigns/new", "/dashboard/campaigns/new", {
        "name": "Colours", "products": GIFT_CARD_USD, "page_background_color": "blue"})
    text = text_of(bad.text)
    assert bad.status_code == 400 and "Background colour: must be a hex colour" in text, text
    assert "webpage_style" not in text


def test_a_campaign_needs_products_and_same_names_are_told_apart(admin, http):
    refused = post(admin, "/dashboard/campaigns/new", "/dashboard/campaigns/new", {"name": "Holiday"})
    assert refused.status_code == 400 and "Choose at least one product" in text_of(refused.text)
    assert ok(http.get("/campaigns"))["campaigns"] == []
    first = post(admin, "/dashboard/campaigns/new", "/dashboard/campaigns/new",
                 {"name": "Holiday", "products": GIFT_CARD_USD})
    assert first.status_code == 303
    campaign_id = first.headers["location"].split("/")[-1].split("?")[0]
    emptied = post(admin, f"/dashboard/campaigns/{campaign_id}", f"/dashboard/campaigns/{campaign_id}",
                   {"name": "Holiday"})
    assert emptied.status_code == 400 and "Choose at least one product" in text_of(emptied.text)
    assert ok(http.get(f"/campaigns/{campaign_id}"))["campaign"]["products"] == [GIFT_CARD_USD]
    second = make_campaign(http, products=(GIFT_CARD_USD, CHARITY_USD), name="Holiday")
    make_campaign(http, name="Spring")
    for path in ("/dashboard/send", "/dashboard/send/bulk"):
        options = dict(re.findall(r'<option value="([A-Z0-9]{12,})"[^>]*>([^<]*)</option>', admin.get(path).text))
        assert options[campaign_id] != options[second["id"]], options
        assert "1 product" in options[campaign_id] and "2 products" in options[second["id"]]
        assert second["id"] in options[second["id"]]
        assert "Spring" in options.values()  # a name used once is shown as it is


def test_generate_a_new_link_redirects_and_shows_the_link_once(admin, http, org):
    reward = place(http, org.member_email, method="LINK")["rewards"][0]
    path = f"/dashboard/rewards/{reward['id']}"
    response = post(admin, path, f"{path}/link", {})
    assert response.status_code == 303 and response.headers["location"] == path
    page = admin.get(path)
    link = re.search(r'id="new-link" readonly value="(http://127\.0\.0\.1:\d+/redeem/[A-Za-z0-9_\-]+)"', page.text)
    assert link and "A new link was generated" in text_of(page.text)
    with page_client(admin.base_url) as client:
        assert client.get(link.group(1)).status_code == 200
    reloaded = admin.get(path)
    assert "/redeem/" not in reloaded.text and "A new link was generated" not in reloaded.text
    assert text_of(reloaded.text).count("Link issued") == 2  # the first and the generated one, no third


def test_the_reward_page_says_what_its_link_answers(admin, http, org, engine):
    def link_line(reward_id: str) -> str:
        text = text_of(admin.get(f"/dashboard/rewards/{reward_id}").text)
        return re.search(r"Link issued [0-9: -]+: ([^.]*?) Delivery history", text).group(1)

    live_id, _ = link_reward(org)
    assert link_line(live_id) == "valid"
    for status, expected in (("CANCELED", "no longer works: the reward was canceled"),
                             ("EXPIRED", "no longer works: the reward expired")):
        reward_id, link = link_reward(org)
        with db.write(engine) as conn:
            conn.execute(update(rewards).where(rewards.c.id == reward_id).values(status=status))
        try:
            with page_client(admin.base_url) as client:
                assert client.get(link).status_code == 410
            assert link_line(reward_id) == expected
        finally:  # a status set without its refund: undone, for the later tests' ledger verify
            with db.write(engine) as conn:
                conn.execute(update(rewards).where(rewards.c.id == reward_id).values(status="ACTIVE"))
    # Past its expiry, not yet swept: already expired for its link.
    reward_id, link = link_reward(org)
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward_id).values(expires_at=utcnow()))
    with page_client(admin.base_url) as client:
        assert client.get(link).status_code == 410
    assert link_line(reward_id) == "no longer works: the reward expired"
    # Redeemed: the page names the product by its catalog name.
    reward_id, link = link_reward(org)
    with page_client(admin.base_url) as client:
        page = client.get(link)
        assert client.post(link, data={"csrf_token": page_csrf(page.text), "product_id": GIFT_CARD_USD}
                           ).status_code == 303
    assert link_line(reward_id).startswith("no longer redeemable: the reward was redeemed")
    text = text_of(admin.get(f"/dashboard/rewards/{reward_id}").text)
    assert re.search(r"Redeemed [0-9: -]+ for Northwind Books \(product PGCNWBOOKS01US\)", text), text


def test_a_placed_file_shows_no_balance_warning(admin, http, org):
    email = org.member_email
    content = f"name,email,amount\nAda,{email},2000\nBob,{email},1000\n"
    response = upload(admin, content, products=CHARITY_USD)
    location = response.headers["location"]
    assert "Place order of 2 rewards" in text_of(admin.get(location).text)
    assert post(admin, location, location, {}).status_code == 303  # 3,000 of 5,000 used
    _, text = preview_of(admin, content, products=CHARITY_USD)
    assert "This file was already sent with these choices as order" in text
    # Sending it again would cost another 3,000 of the 2,000 left: said as such, no button.
    assert "The balance is too low for sending it again." in text, text
    assert "Send it again" not in text


def test_sign_in_emails_tell_apart_organizations_of_the_same_name(engine, server):
    from largesse.orgs import service as orgs

    email = "twice@acme.example"
    with db.write(engine) as conn:
        first = orgs.create_org(conn, name="Acme Twins", member_email=email, member_name="Tia", sandbox=True)
        second = orgs.create_org(conn, name="Acme Twins", member_email="boss@acme.example", member_name="Boss",
                                 sandbox=True)
        orgs.add_member(conn, organization_id=second.organization_id, email=email, name="Tia", role="MEMBER")
    with page_client(server.url) as client:
        form = client.get("/dashboard/signin")
        client.post("/dashboard/signin", data={"csrf_token": page_csrf(form.text), "email": email, "next": ""})
    deliver_mail(engine, server.settings)
    import mailbox

    box = mailbox.Maildir(server.settings.mail_dir, create=False)
    bodies = [m.get_payload(decode=True).decode() for m in box
              if m["X-Largesse-Kind"] == "dashboard-signin" and email in m["To"]]
    assert len(bodies) == 2 and len(signin_links(server.settings, email)) == 2
    by_org = {org_id: next(b for b in bodies if org_id in b)
              for org_id in (first.organization_id, second.organization_id)}
    assert f"Organization: Acme Twins (ID {first.organization_id}); your role there: Administrator" in \
        by_org[first.organization_id]
    assert f"(ID {second.organization_id}); your role there: Member" in by_org[second.organization_id]


def test_categories_and_counts_read_as_written(admin, http, org):
    send = text_of(admin.get("/dashboard/send").text)
    bulk = text_of(admin.get("/dashboard/send/bulk").text)
    for text in (send, bulk):
        assert "ACH" in text and "PayPal" in text, text
        assert "Ach" not in text and "Paypal" not in text and "(ach;" not in text and "(paypal;" not in text
    from largesse.dashboard.web import number

    assert number(3202) == "3,202" and number(1234567) == "1,234,567"
    for _ in range(3):  # 1,200 rewards this month, 400 an order
        ok(http.post("/orders", json=many_rewards_body(org.member_email, [1] * 400, products=(CHARITY_USD,))))
    text = text_of(admin.get("/dashboard").text)
    assert "Active 1,200" in text and "1200" not in text, text
