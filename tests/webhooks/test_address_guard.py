"""The address guard: internal targets are refused at creation, at simulate and at sending.

No test here sends anything to a non-loopback address: URLs the guard accepts are deleted
before any event could be queued for them (their organization never orders), and the
sending-time check is exercised with a loopback receiver that must receive nothing.
"""

import time

import pytest
from sqlalchemy import select

from largesse import db
from largesse.delivery.models import jobs
from largesse.webhooks import addresses
from tests.conftest import create_org
from tests.delivery.conftest import wait_for
from tests.webhooks.kit import settle

REFUSED = [
    "http://2130706433/", "http://127.1/", "http://0x7f.1/", "http://0177.0.0.1/", "http://127.0.0.1:8000/x",
    "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/", "http://[::127.0.0.1]/",
    "http://[64:ff9b::10.0.0.1]/", "http://[2002:a9fe:a9fe::]/", "http://[fe80::1]/", "http://[fc00::1]/",
    "http://localhost/", "http://LOCALHOST./", "http://foo.localhost/", "https://a.b.localhost:8443/",
    "http://0.0.0.0/", "http://0/", "http://[::]/", "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/", "http://172.16.5.4/", "http://192.168.1.1/", "http://100.64.0.1/",
    "http://224.0.0.1/", "http://255.255.255.255/", "http://240.0.0.1/", "http://198.18.0.1/",
    "http://user:pw@127.0.0.1/", "http://1.2.3.4.5/", "http://08.0.0.1/",
    "http://[fec0::1]/", "http://[feff::1]/", "http://[3fff::1]/",  # site-local; documentation (RFC 9637)
    "http://192.0.0.8/", "http://192.88.99.1/",  # IETF protocol assignments; 6to4 relay anycast
]


@pytest.fixture
def strict(make_server, engine):
    """A server with the guard on, and an organization there that never orders."""
    server = make_server(webhook_allow_private=False)
    org = create_org(engine, server.url)
    with org.http() as client:
        yield client


@pytest.mark.parametrize("url", REFUSED)
def test_internal_targets_are_refused_at_creation(strict, url):
    response = strict.post("/webhooks", json={"url": url})
    assert response.status_code == 400, response.text
    body = response.json()["errors"]
    assert set(body) == {"message", "payload"}
    assert list(body["payload"]) == ["url"] and len(body["payload"]["url"]) == 1
    assert strict.get("/webhooks").json() == {"webhooks": []}


@pytest.mark.parametrize("url", ["http://93.184.216.34/hooks", "https://[2606:4700:4700::1111]:8443/h?x=1",
                                 "https://[::ffff:8.8.8.8]/h"])
def test_public_addresses_are_accepted(strict, url):
    hook = strict.post("/webhooks", json={"url": url})
    assert hook.status_code == 200, hook.text
    # Deleted at once: nothing is ever queued for it (this organization never orders).
    assert strict.delete(f"/webhooks/{hook.json()['webhook']['id']}").status_code == 204


def test_names_resolving_to_internal_addresses_are_refused():
    """`localhost` really resolves (from /etc/hosts): the check of resolved addresses refuses it
    even without the static rule for local names."""
    target = addresses.parse("http://localhost:9/x")
    resolved = addresses.resolve(target, 5)
    assert resolved and all(a.is_loopback for a in resolved)
    with pytest.raises(addresses.UnsafeURL, match="resolves to") as refused:
        addresses.check_resolved(target, resolved, allow_private=False)
    # Not which address: the API would tell any client what an internal name resolves to.
    assert not any(str(a) in str(refused.value) for a in resolved) and "loopback" not in str(refused.value)
    addresses.check_resolved(target, resolved, allow_private=True)  # the laptop setting


def test_an_organizations_hanging_lookups_never_block_another_organizations(monkeypatch):
    """getaddrinfo cannot be cancelled: a lookup past its deadline keeps its thread. One
    organization's hanging names use up its own share of lookups only."""
    import socket
    import threading

    release = threading.Event()
    real = socket.getaddrinfo

    def fake(host, *args, **kwargs):
        if host.endswith(".hang.test"):
            release.wait(30)
            raise socket.gaierror("gave up")
        return real("127.0.0.1", *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    try:
        for i in range(addresses.LOOKUPS_PER_OWNER):
            with pytest.raises(addresses.ResolutionFailed, match="longer than"):
                addresses.resolve(addresses.parse(f"http://n{i}.hang.test/"), 0.05, "ORGSLOW")
        began = time.monotonic()
        with pytest.raises(addresses.ResolutionFailed, match="too many name lookups"):
            addresses.resolve(addresses.parse("http://more.hang.test/"), 5, "ORGSLOW")
        assert time.monotonic() - began < 1  # refused at once, not after its deadline
        for i in range(8):  # another organization's names resolve, one after another as ever
            assert addresses.resolve(addresses.parse(f"http://fine{i}.example/"), 5, "ORGFINE")
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while addresses._lookups and time.monotonic() < deadline:  # the hung lookups end and free the share
        time.sleep(0.01)
    assert addresses._lookups == {}


def test_sending_time_guard_refuses_a_loopback_receiver(http, receiver, engine, fast, make_server, org):
    """A webhook accepted while private targets were allowed, sent by a worker that does not
    allow them: the receiver gets nothing, the attempt is a permanent refusal, and simulate
    on a strict server answers 422."""
    settings = fast(webhook_allow_private=False)
    settle(engine, fast())
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    assert http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "REWARDS.CANCELED"}).status_code == 200

    log = wait_for(lambda: http.get(f"/webhooks/{hook['id']}/deliveries").json()["deliveries"],
                   settings=settings, engine=engine)
    time.sleep(0.2)
    assert receiver.requests == []
    assert log[0]["status"] == "FAILED" and log[0]["will_retry"] is False
    assert "refused" in log[0]["error"] and "loopback" in log[0]["error"]
    with db.read(engine) as conn:
        statuses = conn.execute(select(jobs.c.status).where(jobs.c.organization_id == org.id,
                                                            jobs.c.kind == "deliver_webhook")).scalars().all()
    assert statuses == ["dead"]

    strict = make_server(webhook_allow_private=False)
    with org.http() as client:
        client.base_url = f"{strict.url}/api/v2"
        refused = client.post(f"/webhooks/{hook['id']}/simulate", json={"event": "REWARDS.CANCELED"})
        assert refused.status_code == 422 and "loopback" in refused.json()["errors"]["payload"]["url"][0]
        delivery_id = log[0]["id"]
        resent = client.post(f"/webhooks/{hook['id']}/deliveries/{delivery_id}/resend")
        assert resent.status_code == 422, resent.text
    assert http.delete(f"/webhooks/{hook['id']}").status_code == 204


def _rebinding(monkeypatch, port: int) -> None:
    """Names under .rebind.test resolve to 127.0.0.1 (an in-process resolver: no DNS query
    leaves the machine); other names resolve as ever."""
    import socket

    real = socket.getaddrinfo

    def fake(host, *args, **kwargs):
        if str(host).endswith(".rebind.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_a_name_resolving_inside_at_sending_time_is_refused(monkeypatch):
    """A name that pointed outside at creation and resolves to 127.0.0.1 when an event is
    sent (DNS rebinding): check_for_send refuses it, before any connection."""
    _rebinding(monkeypatch, 9)
    with pytest.raises(addresses.UnsafeURL, match="resolves to"):
        addresses.check_for_send("http://hooks.rebind.test:9/x", False, time.monotonic() + 5)
    target, resolved = addresses.check_for_send("http://hooks.rebind.test:9/x", True, time.monotonic() + 5)
    assert target.host == "hooks.rebind.test" and [str(a) for a in resolved] == ["127.0.0.1"]


def test_a_name_resolving_to_one_public_and_one_private_address_is_refused():
    """Every address is checked: one public address among them does not let a private one in."""
    import ipaddress

    target = addresses.parse("http://mixed.example/x")
    for resolved in ([ipaddress.IPv4Address("93.184.216.34"), ipaddress.IPv4Address("10.0.0.1")],
                     [ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("93.184.216.34")]):
        with pytest.raises(addresses.UnsafeURL, match="resolves to"):
            addresses.check_resolved(target, resolved, allow_private=False)
    addresses.check_resolved(target, [ipaddress.IPv4Address("93.184.216.34")], allow_private=False)


def test_a_delivery_to_a_name_resolving_inside_fails_for_good(http, engine, fast, monkeypatch):
    """The worker (in this process) resolves the webhook's name to 127.0.0.1: the attempt is a
    permanent refusal, not a retry. Nothing listens at that port (a bound socket that never
    accepts), so even a guard that let it through would deliver nothing."""
    import socket

    settings = fast(webhook_allow_private=False)
    settle(engine, fast())
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused
    try:
        _rebinding(monkeypatch, closed.getsockname()[1])
        url = f"http://hooks.rebind.test:{closed.getsockname()[1]}/x"
        hook = http.post("/webhooks", json={"url": url}).json()["webhook"]
        assert http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "REWARDS.CANCELED"}).status_code == 200
        log = wait_for(lambda: http.get(f"/webhooks/{hook['id']}/deliveries").json()["deliveries"],
                       settings=settings, engine=engine)
        assert log[0]["status"] == "FAILED" and log[0]["will_retry"] is False
        assert "refused" in log[0]["error"] and "resolves to" in log[0]["error"]
        assert http.delete(f"/webhooks/{hook['id']}").status_code == 204
    finally:
        closed.close()


@pytest.mark.parametrize("url", [
    "ftp://example.com/x", "http://", "http:///x", "http://exa mple.com/", "http://a\\@127.0.0.1/",
    "http://[::1/", "http://[zz::1]/", "http://host:99999/", "http://host:0/", "http://" + "a" * 300 + ".com/",
    "http://xn--/", "javascript:alert(1)", "http://example.com/\u0000", "http://ex\u00e4mple.com:80/p\u00e4th",
])
def test_malformed_urls_never_500(http, url):
    # Through the shared server (private targets allowed): it resolves no name at creation,
    # so no DNS query leaves the machine.
    response = http.post("/webhooks", json={"url": url})
    assert response.status_code in (200, 400), response.text
    if response.status_code == 200:
        assert http.delete(f"/webhooks/{response.json()['webhook']['id']}").status_code == 204


def test_odd_bodies_never_500(http, receiver):
    hook = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    for body in (b"", b"null", b"[]", b'"x"', b"{}", b'{"url": 5}', b'{"url": null}', b'{"url": ["http://a"]}',
                 b'{"url": "http://a.com/' + b"x" * 3000 + b'"}', b'{"url": "http://\\u0000/"}', b"{bad json",
                 b'{"url": "http://\\ud800.com/"}', b'{"url": "https://[::ffff:1.2.3.4]:65535/"}'):
        response = http.post("/webhooks", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code < 500, (body, response.text)
        if response.status_code == 200 and response.json()["webhook"]["url"] != receiver.url:
            http.post("/webhooks", json={"url": receiver.url})  # back to the receiver: nothing leaves loopback
    for body in (b"", b"{}", b'{"event": 5}', b'{"event": "\\u0000"}', b'{"event": "' + b"E" * 500 + b'"}'):
        response = http.post(f"/webhooks/{hook['id']}/simulate", content=body,
                             headers={"Content-Type": "application/json"})
        assert response.status_code in (400, 422), (body, response.text)
    assert http.delete(f"/webhooks/{hook['id']}").status_code == 204


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "file:///etc/passwd", "http:///x", "http://[::1/"])
def test_a_malformed_url_is_refused_in_the_words_of_every_other_refusal(strict, url):
    """A URL that is not http(s) or has no host read "Invalid request: url: must be an http(s)
    URL" (the body model's validator) where every other refusal reads "Invalid request: url
    must …" (docs/webhooks.md)."""
    response = strict.post("/webhooks", json={"url": url})
    assert response.status_code == 400, response.text
    body = response.json()["errors"]
    [why] = body["payload"]["url"]
    assert body["message"] == f"Invalid request: url {why}" and why.startswith(("must ", "is not ")), body
    assert strict.get("/webhooks").json() == {"webhooks": []}


@pytest.mark.parametrize(("url", "why"), [
    ("http://240.0.0.1/", "must not point to a reserved address (240.0.0.1)"),
    ("http://250.1.2.3:8080/x", "must not point to a reserved address (250.1.2.3)"),
    ("http://255.255.255.255/", "must not point to a private address (255.255.255.255)"),  # as documented
])
def test_reserved_addresses_are_refused_as_reserved(strict, url, why):
    """240/4 is its own category in docs/webhooks.md; it was refused as "a private address"
    (Python counts it private too, and that was asked first)."""
    response = strict.post("/webhooks", json={"url": url})
    assert response.status_code == 400, response.text
    assert response.json()["errors"] == {"message": f"Invalid request: url {why}", "payload": {"url": [why]}}
    assert strict.get("/webhooks").json() == {"webhooks": []}
