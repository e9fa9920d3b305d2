"""Pinned connections keep the hostname: Host header, TLS SNI and certificate verification."""

import datetime
import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from largesse.webhooks import sender
from tests.delivery.conftest import wait_for
from tests.webhooks.kit import settle


def _cert(name: str, key, issuer_name, issuer_key, *, ca: bool, san=None):
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class TLSReceiver:
    """An HTTPS receiver on 127.0.0.1 whose certificate names only `localhost`."""

    def __init__(self, tmp_path):
        ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Largesse test CA")])
        ca = _cert("Largesse test CA", ca_key, ca_name, ca_key, ca=True)
        leaf = _cert("localhost", leaf_key, ca_name, ca_key, ca=False, san=[x509.DNSName("localhost")])
        self.ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
        self.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert_file, key_file)
        self.server_names: list[str | None] = []
        self.requests: list[bytes] = []
        self.context.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _serve(self):
        while not self.stopping.is_set():
            try:
                raw, _ = self.sock.accept()
            except OSError:
                continue
            try:
                raw.settimeout(5)
                with self.context.wrap_socket(raw, server_side=True) as conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    self.requests.append(data)
                    conn.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            except (OSError, ssl.SSLError):
                raw.close()

    def close(self):
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def tls_receiver(tmp_path, monkeypatch):
    receiver = TLSReceiver(tmp_path)
    # Trust the test CA instead of the system's (verification itself stays on).
    monkeypatch.setattr(sender, "_ssl_context", ssl.create_default_context(cafile=str(receiver.ca_file)))
    yield receiver
    receiver.close()


def test_https_by_name_keeps_host_sni_and_verification(http, engine, fast, tls_receiver):
    settings = fast()
    settle(engine, settings)
    hook = http.post("/webhooks", json={"url": f"https://localhost:{tls_receiver.port}/hooks"}).json()["webhook"]
    http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "ORDERS.CREATED"})
    delivered = wait_for(lambda: http.get(f"/webhooks/{hook['id']}/deliveries",
                                          params={"status": "SUCCEEDED"}).json()["deliveries"],
                         settings=settings, engine=engine)
    assert delivered[0]["response_status"] == 204
    assert tls_receiver.server_names[0] == "localhost"
    head = tls_receiver.requests[0].decode("latin-1").lower()
    assert f"\r\nhost: localhost:{tls_receiver.port}\r\n" in head and head.startswith("post /hooks http/1.1")


def test_certificate_is_checked_against_the_url_host(tls_receiver):
    """The same server reached as https://127.0.0.1: its certificate names localhost, not the
    address, so the handshake fails (the pinned address never replaces the name in the check)."""
    from largesse.webhooks import addresses

    target = addresses.parse(f"https://127.0.0.1:{tls_receiver.port}/hooks")
    with pytest.raises(sender.SendFailed, match="(?i)certificate"):
        sender.post(target, [ipaddress.ip_address("127.0.0.1")], b"{}", {}, deadline=_soon())


def _soon() -> float:
    import time

    return time.monotonic() + 5
