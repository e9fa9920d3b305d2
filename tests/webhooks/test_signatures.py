"""Both signature schemes, checked against an independent implementation (the standardwebhooks
package) on a real delivery and on the test vectors published in docs/webhooks.md."""

import base64
import hashlib
import hmac
import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from largesse.webhooks import signatures
from tests.delivery.conftest import wait_for
from tests.webhooks.kit import settle

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def _doc_vectors() -> dict[str, str]:
    text = DOC.read_text()
    block = re.search(r"### Test vectors.*?```text\n(.*?)```", text, re.S).group(1)
    vectors = {}
    for line in block.strip().splitlines():
        name, _, value = line.partition(": ")
        vectors[name] = value[1:-1] if name == "body" else value
    return vectors


def _doc_snippet() -> dict:
    """The receivers' verification snippet of the doc, executed as given."""
    code = re.search(r"Verify over the raw bytes, before parsing:\n\n```python\n(.*?)```", DOC.read_text(), re.S)
    namespace: dict = {}
    exec(code.group(1), namespace)  # noqa: S102 - our own documentation
    return namespace


def test_documented_vectors():
    v = _doc_vectors()
    body, key, msg_id, ts = v["body"].encode(), v["private_key"], v["webhook-id"], int(v["webhook-timestamp"])
    # Independent implementations: the standardwebhooks package and hmac by hand.
    independent = Webhook(v["signing_secret"]).sign(msg_id, datetime.fromtimestamp(ts, tz=UTC), v["body"])
    assert independent == v["webhook-signature"]
    assert "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest() == v["Tremendous-Webhook-Signature"]
    assert v["signing_secret"] == "whsec_" + base64.b64encode(key.encode()).decode()
    # Ours.
    assert signatures.standard_secret(key) == v["signing_secret"]
    assert signatures.headers(key, msg_id, ts, body) == {
        "Tremendous-Webhook-Signature": v["Tremendous-Webhook-Signature"], "webhook-id": msg_id,
        "webhook-timestamp": str(ts), "webhook-signature": v["webhook-signature"]}
    # The doc's snippet accepts the vectors and refuses a changed body.
    snippet = _doc_snippet()
    headers = {"Tremendous-Webhook-Signature": v["Tremendous-Webhook-Signature"], "webhook-id": msg_id,
               "webhook-timestamp": str(ts), "webhook-signature": v["webhook-signature"]}
    assert snippet["verify_tremendous"](key, body, headers)
    assert snippet["verify_standard"](key, body, headers, tolerance=10**10)
    assert not snippet["verify_standard"](key, body + b" ", headers, tolerance=10**10)
    assert not snippet["verify_standard"](key, body, headers)  # far outside the 5 min tolerance


def test_delivery_verifies_with_standardwebhooks(http, receiver, engine, fast):
    settings = fast()
    settle(engine, settings)
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    assert hook["signing_secret"] == signatures.standard_secret(hook["private_key"])
    receiver.statuses = [503]  # the first attempt fails: the retry must keep webhook-id
    assert http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "ORDERS.CREATED"}).status_code == 200
    wait_for(lambda: len(receiver.requests) >= 2, settings=settings, engine=engine)

    (first_headers, first_body), (headers, body) = receiver.requests[:2]
    event = json.loads(body)
    assert Webhook(hook["signing_secret"]).verify(body, headers) == event
    assert headers["webhook-id"] == first_headers["webhook-id"] == event["uuid"]
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 120
    assert headers["tremendous-webhook-signature"] == (
        "sha256=" + hmac.new(hook["private_key"].encode(), body, hashlib.sha256).hexdigest())
    with pytest.raises(WebhookVerificationError):
        Webhook(hook["signing_secret"]).verify(body.replace(b"ORDERS", b"ORDERZ"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signatures.standard_secret("0" * 64)).verify(body, headers)
