"""Inventory codes: the CLI import and status, and issuing the last code exactly once."""

from __future__ import annotations

import json
import threading

from largesse import db
from largesse.redemption import inventory
from tests.redemption.conftest import GIFT_CARD, csrf_of, inventory_product, link_reward, page_client


def test_import_skips_and_counts_duplicates(cli, tmp_path, engine):
    product_id = inventory_product(engine, codes=[])
    (tmp_path / "codes.csv").write_text("code,pin\nAAA-1,1111\nBBB-2\nAAA-1,2222\n")
    result = cli("inventory", "import", product_id, str(tmp_path / "codes.csv"))
    assert "imported 2 codes" in result.stdout and "skipped 1 duplicates" in result.stdout
    (tmp_path / "more.csv").write_text("BBB-2\nCCC-3,3333\n\n")
    result = cli("inventory", "import", product_id, str(tmp_path / "more.csv"))
    assert "imported 1 codes" in result.stdout and "skipped 1 duplicates" in result.stdout
    status = json.loads(cli("inventory", "status", "--json").stdout)
    row = next(r for r in status["products"] if r["product_id"] == product_id)
    assert (row["total"], row["issued"], row["available"]) == (3, 0, 3)
    assert cli("inventory", "import", "PNOSUCHPRODUCT", str(tmp_path / "more.csv"), check=False).returncode == 1


def test_last_code_goes_to_exactly_one_reward(prod_org, engine):
    product_id = inventory_product(engine, codes=["ONLY-CODE-1,4321"])
    links = [link_reward(prod_org, products=(product_id, GIFT_CARD))[1] for _ in range(2)]
    sessions = []
    for link in links:
        client = page_client()
        page = client.get(link)
        assert f'value="{product_id}" required' in page.text and "Out of stock" not in page.text
        sessions.append((client, link, csrf_of(page.text)))
    barrier, statuses = threading.Barrier(2), {}

    def attempt(client, link, token):
        barrier.wait()
        statuses[link] = client.post(link, data={"csrf_token": token, "product_id": product_id}).status_code

    threads = [threading.Thread(target=attempt, args=s) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses.values()) == [303, 409]
    winner, loser = sorted(sessions, key=lambda s: statuses[s[1]])
    shown = winner[0].get(winner[1]).text
    assert "ONLY-CODE-1" in shown and "4321" in shown and "has no value" not in shown
    page = loser[0].get(loser[1]).text
    assert "Unavailable: Out of stock right now" in page and 'type="radio"' in page
    for client, _, _ in sessions:
        client.close()
    with db.read(engine) as conn:
        row = next(r for r in inventory.stock(conn) if r["product_id"] == product_id)
    assert (row["issued"], row["available"]) == (1, 0)


def test_unfulfillable_products_are_shown_unavailable(prod_org, engine):
    empty = inventory_product(engine, codes=[])
    unfulfilled = inventory_product(engine, codes=[], fulfillment=None)
    _, link = link_reward(prod_org, products=(empty, unfulfilled))
    with page_client() as client:
        page = client.get(link)
        assert "Unavailable: Out of stock right now" in page.text and "Confirm my choice" not in page.text
        assert "Unavailable: Not available at the moment" in page.text and page.text.count(" disabled") == 2
        refused = client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": empty})
        assert refused.status_code == 409 and 'role="alert"' in refused.text


def test_the_sandbox_takes_no_codes_of_a_database_that_serves_production(org, prod_org, engine):
    """A database shared with production holds real codes: a sandbox organization's free
    balance cannot take them (a sandbox-only database issues its codes: the tests above)."""
    product_id = inventory_product(engine, codes=["REAL-CODE-1,1234"])
    _, link = link_reward(org, products=(product_id, GIFT_CARD))
    _refused_and_kept(engine, link, product_id, "Not available in the sandbox", "REAL-CODE-1")


def _refused_and_kept(engine, link: str, product_id: str, reason: str, code: str) -> None:
    """The page shows the product unavailable for `reason`, choosing it is refused without
    `code`, and the product's one code stays unissued."""
    with page_client() as client:
        page = client.get(link)
        assert f"Unavailable: {reason}" in page.text
        refused = client.post(link, data={"csrf_token": csrf_of(page.text), "product_id": product_id})
        assert refused.status_code == 409 and code not in refused.text
    with db.read(engine) as conn:
        row = next(r for r in inventory.stock(conn) if r["product_id"] == product_id)
    assert (row["issued"], row["available"]) == (0, 1)


def test_codes_serve_only_a_product_of_one_value(prod_org, engine, cli, tmp_path):
    """A code carries no value of its own: a 400 EUR reward got a code loaded as a 25 USD card of
    a product offered at 5-500 in four currencies. Such a product takes no codes, and codes that
    reached one earlier are never issued."""
    from sqlalchemy import insert, update

    from largesse.catalog.models import products
    from largesse.redemption.models import inventory_codes
    from largesse.timeutil import utcnow

    product_id = inventory_product(engine, codes=[])
    with db.write(engine) as conn:  # offered over a range now, as the audit's product was
        conn.execute(update(products).where(products.c.id == product_id).values(
            skus=[{"min_cents": 500, "max_cents": 50000, "currency_code": "USD"}]))
    (tmp_path / "codes.csv").write_text("CARD-25-1\n")
    refused = cli("inventory", "import", product_id, str(tmp_path / "codes.csv"), check=False)
    assert refused.returncode == 1 and "one fixed value in one currency" in refused.stderr, refused.stderr
    with db.write(engine) as conn:  # a code loaded before the import refused it
        conn.execute(insert(inventory_codes).values(product_id=product_id, code="OLD-CODE-1", imported_at=utcnow()))
    _, link = link_reward(prod_org, products=(product_id, GIFT_CARD))
    _refused_and_kept(engine, link, product_id, "Not available at the moment", "OLD-CODE-1")
