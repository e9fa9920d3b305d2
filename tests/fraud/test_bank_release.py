"""A held bank deposit: the account the recipient gave is kept encrypted on the review while it is
held, paid on release and erased by release, block and expiry (docs/fraud.md, "Held bank details")."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import text

from largesse import db
from largesse.delivery import service as delivery
from largesse.timeutil import utcnow
from tests.factories import available_cents
from tests.fraud.conftest import payout_count, refund_count
from tests.redemption.conftest import csrf_of, fake_ip, link_reward, page_client

BANK = "PCSBANKACH01US"
ROUTING = "021000021"
ACCOUNT = "000123454321"
HOLDER = "Alex Recipient"
VALID = {"holder_name": HOLDER, "routing_number": ROUTING, "account_number": ACCOUNT, "account_type": "savings"}


def _stored(engine, reward_id: str):
    with db.read(engine) as conn:
        return conn.execute(text("SELECT encrypted_details FROM fraud_reviews WHERE reward_id = :id"),
                            {"id": reward_id}).scalar_one()


def _held_bank_deposit(org, http, **extra) -> tuple[str, str]:
    ip = fake_ip()
    assert http.post("/fraud_rules/review_ip", json={"config": {"ips": [ip]}}).status_code == 200
    reward_id, link = link_reward(org, products=(BANK,), denomination=30, **extra)
    with page_client(ip) as client:
        token = csrf_of(client.get(link).text)
        assert client.post(link, data={"csrf_token": token, "product_id": BANK, **VALID}).status_code == 303
        assert "under review" in client.get(link).text
    return reward_id, link


def test_a_held_bank_deposit_is_stored_encrypted_and_paid_on_release(org, engine, http, cli, caplog):
    with caplog.at_level(logging.DEBUG):
        reward_id, link = _held_bank_deposit(org, http)
        stored = _stored(engine, reward_id)
        assert stored  # kept while held ...
        for secret in (ACCOUNT, ROUTING, HOLDER, ACCOUNT[-4:]):  # ... and never in plain text
            assert secret not in stored
        review = http.get(f"/fraud_reviews/{reward_id}")
        assert stored not in review.text and ACCOUNT not in review.text
        assert payout_count(engine, reward_id) == 0

        released = http.put(f"/fraud_reviews/{reward_id}/release")
        assert released.status_code == 200, released.text
        assert released.json()["fraud_review"]["status"] == "released"
    assert payout_count(engine, reward_id) == 1
    assert _stored(engine, reward_id) is None  # erased with the payout
    with page_client() as client:
        shown = client.get(link).text
    assert "Direct Bank Deposit to the savings account ending 4321 recorded" in shown
    assert ACCOUNT not in shown and ROUTING not in shown
    assert ACCOUNT not in caplog.text and ROUTING not in caplog.text and stored not in caplog.text
    again = http.put(f"/fraud_reviews/{reward_id}/release")  # a repeated release pays nothing more
    assert again.status_code == 200 and payout_count(engine, reward_id) == 1
    cli("ledger", "verify")


def test_a_blocked_bank_deposit_is_refunded_and_its_details_erased(org, engine, http, cli):
    reward_id, _ = _held_bank_deposit(org, http)
    before = available_cents(http)
    assert _stored(engine, reward_id)
    blocked = http.put(f"/fraud_reviews/{reward_id}/block")
    assert blocked.status_code == 200 and blocked.json()["fraud_review"]["status"] == "blocked"
    assert available_cents(http) == before + 3000 and refund_count(engine, reward_id) == 1
    assert payout_count(engine, reward_id) == 0
    assert _stored(engine, reward_id) is None
    cli("ledger", "verify")


def test_a_held_bank_deposit_that_expires_has_its_details_erased(org, engine, http):
    reward_id, _ = _held_bank_deposit(org, http)
    assert _stored(engine, reward_id)
    with db.write(engine) as conn:  # as if its expiry had passed while it waited for the review
        conn.execute(text("UPDATE rewards SET expires_at = :at WHERE id = :id"),
                     {"at": utcnow() - timedelta(seconds=1), "id": reward_id})
    delivery.expire_due(engine)
    assert _stored(engine, reward_id) is None
    assert refund_count(engine, reward_id) == 1
    released = http.put(f"/fraud_reviews/{reward_id}/release")
    assert released.status_code == 422 and payout_count(engine, reward_id) == 0


def test_a_held_gift_card_stores_no_details(org, engine, http):
    from tests.fraud.conftest import redeem
    from tests.redemption.conftest import GIFT_CARD

    ip = fake_ip()
    assert http.post("/fraud_rules/review_ip", json={"config": {"ips": [ip]}}).status_code == 200
    reward_id, link = link_reward(org, products=(GIFT_CARD,))
    assert "under review" in redeem(link, ip=ip)
    assert _stored(engine, reward_id) is None


def test_held_details_that_cannot_be_read_are_a_422_and_the_review_can_still_be_blocked(org, engine, http,
                                                                                         base_settings):
    """Sealed under the server's key but not a bank account (a bad write): the release answered
    500. Not a token at all, or none stored (held before migration 0027): 422 too. Either way
    nothing is paid, the review stays flagged, and a block refunds it."""
    from largesse import crypto

    box = crypto.keybox(base_settings, crypto.RECIPIENT_DETAILS)
    for stored in (box.encrypt('{"kind": "us_bank_account"}'), box.encrypt("[]"), "not-a-fernet-token", None):
        reward_id, _ = _held_bank_deposit(org, http)
        with db.write(engine) as conn:
            conn.execute(text("UPDATE fraud_reviews SET encrypted_details = :s WHERE reward_id = :id"),
                         {"s": stored, "id": reward_id})
        refused = http.put(f"/fraud_reviews/{reward_id}/release")
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"]["payload"]["id"], refused.text
        assert payout_count(engine, reward_id) == 0
        assert http.get(f"/fraud_reviews/{reward_id}").json()["fraud_review"]["status"] == "flagged"
        assert http.put(f"/fraud_reviews/{reward_id}/block").status_code == 200
        assert refund_count(engine, reward_id) == 1 and _stored(engine, reward_id) is None


def test_details_sealed_under_another_secret_name_the_secret_or_key_file_tried(org, engine, http, base_settings):
    """The 422 of held details that no configured secret opens says what was tried, as the
    webhook 409 does: LARGESSE_SECRET_KEY when it is set, else the key file's path (it said
    "LARGESSE_SECRET_KEY" to an operator who had never set it)."""
    from largesse import crypto

    reward_id, _ = _held_bank_deposit(org, http)
    foreign = crypto.KeyBox(["a-secret-this-server-never-had"], crypto.RECIPIENT_DETAILS)
    with db.write(engine) as conn:
        conn.execute(text("UPDATE fraud_reviews SET encrypted_details = :s WHERE reward_id = :id"),
                     {"s": foreign.encrypt('{"kind": "us_bank_account"}'), "id": reward_id})
    refused = http.put(f"/fraud_reviews/{reward_id}/release")
    assert refused.status_code == 422, refused.text
    message = refused.json()["errors"]["message"]
    tried = crypto.keybox(base_settings, crypto.RECIPIENT_DETAILS).key_file
    assert (f"the key file {tried}" if tried else "cannot be decrypted with LARGESSE_SECRET_KEY") in message, message
    # Blocked, its details erased: `secrets rotate` of other tests on this database finds none it cannot open.
    assert http.put(f"/fraud_reviews/{reward_id}/block").status_code == 200 and _stored(engine, reward_id) is None


def test_secrets_rotate_re_encrypts_held_details(org, engine, http, cli, base_settings):
    """`largesse secrets rotate` re-encrypts held bank details with the webhook keys: after it,
    the old secret can go and the review still pays (docs/webhooks.md's procedure left them
    under the old secret, and dropping it made them unpayable)."""
    import json

    from largesse import crypto

    reward_id, link = _held_bank_deposit(org, http)
    old = crypto.load_or_create_secret(crypto.key_file_path(base_settings.database_url))
    rotated = json.loads(cli("secrets", "rotate", "--json", env={"LARGESSE_SECRET_KEY": f"new,{old}"}).stdout)
    assert rotated["held_bank_details"]["rotated"] >= 1 and rotated["held_bank_details"]["undecryptable"] == []
    assert crypto.KeyBox(["new"], crypto.RECIPIENT_DETAILS).decrypt(_stored(engine, reward_id))[1] is False
    refused = cli("secrets", "rotate", env={"LARGESSE_SECRET_KEY": "unrelated"}, check=False)
    assert refused.returncode == 1 and reward_id in refused.stdout
    # Back under this test server's own secret (the key file), which then pays it.
    cli("secrets", "rotate", env={"LARGESSE_SECRET_KEY": f"{old},new"})
    released = http.put(f"/fraud_reviews/{reward_id}/release")
    assert released.status_code == 200, released.text
    assert payout_count(engine, reward_id) == 1 and _stored(engine, reward_id) is None
