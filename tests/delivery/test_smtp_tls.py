"""SMTP over TLS with login: STARTTLS, SMTPS (implicit TLS), AUTH, and the certificate check.

A local aiosmtpd on 127.0.0.1 presents a certificate from a throwaway CA made here with the
`cryptography` package; Largesse trusts that CA only through LARGESSE_SMTP_CA_FILE
(Settings.smtp_ca_file) or the standard SSL_CERT_FILE, never by turning verification off.
Deliveries go through the real worker: Worker(...).drain() in-process, and `largesse worker
--once` as a process for the environment variables.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import smtplib
import ssl
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from largesse.timeutil import utcnow
from tests.conftest import free_port
from tests.delivery.conftest import SinkHandler, job_rows, reward_row, set_job
from tests.factories import place

# The SMTPS server logs in over implicit TLS, which aiosmtpd's auth_require_tls does not count.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")

USER, PASSWORD = "largesse", "s3cret:p@ss/word"  # characters that need percent-encoding in the URL


# --- a throwaway PKI ------------------------------------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, cert: x509.Certificate, key=None) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _make_ca(directory: Path, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(directory / f"{name}.pem", cert)
    return cert, key


def _make_server_cert(directory: Path, file: str, ca, names: list[str], ips: list[str]) -> Path:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    san = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(directory / f"{file}.pem", cert, key)
    return directory / f"{file}.pem"


def _make_self_signed(directory: Path, file: str) -> Path:
    """A relay's own certificate for 127.0.0.1, signed by itself (no CA behind it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(_name("localhost"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(directory / f"{file}.pem", cert, key)
    return directory / f"{file}.pem"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem (the CA Largesse is told to trust); certificates for 127.0.0.1 from it, from a
    CA nobody trusts, and from it for another host name; a self-signed one (its own trust file)."""
    directory = tmp_path_factory.mktemp("pki")
    trusted, stranger = _make_ca(directory, "ca"), _make_ca(directory, "stranger-ca")
    return {
        "ca": directory / "ca.pem",
        "good": _make_server_cert(directory, "good", trusted, ["localhost"], ["127.0.0.1"]),
        "untrusted": _make_server_cert(directory, "untrusted", stranger, ["localhost"], ["127.0.0.1"]),
        "wrong-name": _make_server_cert(directory, "wrong-name", trusted, ["mail.example.test"], []),
        "self-signed": _make_self_signed(directory, "self-signed"),
    }


# --- a TLS mail server with login -------------------------------------------------------------


class TlsHandler(SinkHandler):
    """The test sink that also records, per message, whether it came over TLS and as whom."""

    def __init__(self):
        super().__init__()
        self.logins: list[tuple[str, str, bool]] = []  # every AUTH attempt: (user, password, over TLS)
        self.received: list[tuple[str, bool, str | None]] = []  # (recipient, over TLS, login)

    def authenticate(self, server, session, envelope, mechanism, auth_data) -> AuthResult:
        user, password = auth_data.login.decode(), auth_data.password.decode()
        with self.lock:
            self.logins.append((user, password, _over_tls(server)))
        if (user, password) == (USER, PASSWORD):
            return AuthResult(success=True, auth_data=user)
        return AuthResult(success=False, handled=False)  # aiosmtpd answers 535

    async def handle_DATA(self, server, session, envelope):
        login = session.auth_data if session.authenticated else None
        with self.lock:
            self.received.extend((rcpt, _over_tls(server), login) for rcpt in envelope.rcpt_tos)
        return await super().handle_DATA(server, session, envelope)


def _over_tls(server) -> bool:
    return server.transport is not None and server.transport.get_extra_info("ssl_object") is not None


class TlsSink:
    """aiosmtpd on 127.0.0.1 with a certificate; mode "starttls" (port 587 style: plain, then
    STARTTLS, AUTH only after it) or "smtps" (port 465 style: TLS from the first byte)."""

    def __init__(self, mode: str, cert: Path):
        self.mode, self.port, self.handler = mode, free_port(), TlsHandler()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, cert.with_suffix(".key"))
        common = dict(hostname="127.0.0.1", port=self.port, authenticator=self.handler.authenticate,
                      auth_required=True)
        if mode == "starttls":
            self.controller = Controller(self.handler, tls_context=context, require_starttls=True,
                                         auth_require_tls=True, **common)
        else:  # the whole connection is TLS; aiosmtpd only counts STARTTLS as "TLS" for auth_require_tls
            self.controller = Controller(self.handler, ssl_context=context, auth_require_tls=False, **common)

    def url(self, user: str = USER, password: str = PASSWORD, *, starttls: bool | None = None) -> str:
        auth = f"{quote(user, safe='')}:{quote(password, safe='')}@" if user else ""
        if self.mode == "smtps":
            return f"smtps://{auth}127.0.0.1:{self.port}"
        query = "?starttls=true" if starttls in (None, True) else ""
        return f"smtp://{auth}127.0.0.1:{self.port}{query}"

    def __enter__(self) -> TlsSink:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()


def _one_drain(fast, drain, **settings) -> None:
    """One worker pass: a long retry delay, so a failed job waits instead of retrying in it."""
    drain(fast(job_retry_base_seconds=60.0, job_retry_max_seconds=60.0, **settings))


def _still_pending(engine, reward_id: str):
    """The delivery failed temporarily: the job is queued for a retry, the reward PENDING."""
    [job] = job_rows(engine, reward_id)
    assert (job.status, job.attempts) == ("queued", 1), job
    assert reward_row(engine, reward_id).delivery_status == "PENDING"
    return job


# --- delivered ------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "cert", "trust"), [
    ("starttls", "good", "ca"), ("smtps", "good", "ca"), ("starttls", "self-signed", "self-signed"),
])
def test_reward_email_over_tls_with_login(mode, cert, trust, pki, org, http, fast, drain, engine):
    with TlsSink(mode, pki[cert]) as server:
        reward_id = place(http, org.member_email)["rewards"][0]["id"]
        drain(fast(smtp_url=server.url(), smtp_ca_file=str(pki[trust])))
        [message] = server.handler.to(org.member_email)
        assert message["X-Largesse-Reward-Id"] == reward_id
        assert (org.member_email, True, USER) in server.handler.received  # over TLS, logged in
        assert all(tls for _, _, tls in server.handler.logins)  # the password never went in clear
    row = reward_row(engine, reward_id)
    assert row.delivery_status == "SUCCEEDED" and [j.status for j in job_rows(engine, reward_id)] == ["done"]


@pytest.mark.parametrize("spelled", ["on", "ON", "Yes", "TRUE", "1"])
def test_starttls_is_read_as_every_on_off_setting(spelled, pki, org, http, fast, drain):
    """`starttls=on` was read as off: the password and the message went in clear."""
    with TlsSink("starttls", pki["good"]) as server:
        place(http, org.member_email)
        url = server.url().replace("starttls=true", f"starttls={spelled}")
        drain(fast(smtp_url=url, smtp_ca_file=str(pki["ca"])))
        assert (org.member_email, True, USER) in server.handler.received
        assert server.handler.logins and all(tls for _, _, tls in server.handler.logins)


def test_wrong_password_is_a_temporary_failure_until_fixed(pki, org, http, fast, drain, engine):
    """A refused login is our configuration, not the recipient's fault: the job waits for a
    retry (up to max_attempts, then FAILED), and goes out once the password is right."""
    with TlsSink("starttls", pki["good"]) as server:
        reward_id = place(http, org.member_email)["rewards"][0]["id"]
        _one_drain(fast, drain, smtp_url=server.url(password="wrong"), smtp_ca_file=str(pki["ca"]))
        job = _still_pending(engine, reward_id)
        assert "535" in job.last_error and f"login of '{USER}'" in job.last_error
        assert "wrong" not in job.last_error  # the password is not written to the job
        assert (USER, "wrong", True) in server.handler.logins and not server.handler.to(org.member_email)

        set_job(engine, reward_id, run_after=utcnow())  # the operator fixed it: retry now
        drain(fast(smtp_url=server.url(), smtp_ca_file=str(pki["ca"])))
        assert len(server.handler.to(org.member_email)) == 1
    assert reward_row(engine, reward_id).delivery_status == "SUCCEEDED"


def test_server_requiring_tls_refuses_auth_in_clear(pki, org, http, fast, drain, engine):
    with TlsSink("starttls", pki["good"]) as server:
        # The server's side: AUTH before STARTTLS is refused (538), whoever asks.
        with smtplib.SMTP("127.0.0.1", server.port, timeout=5) as raw:
            raw.ehlo()
            assert raw.has_extn("starttls") and not raw.has_extn("auth")
            code, _ = raw.docmd("AUTH", "PLAIN " + base64.b64encode(b"\0nobody\0nothing").decode())
            assert code in (530, 538)  # "must issue STARTTLS first" / "encryption required"
        server.handler.logins.clear()

        # Largesse configured without starttls=true: it does not try to log in in clear.
        reward_id = place(http, org.member_email)["rewards"][0]["id"]
        _one_drain(fast, drain, smtp_url=server.url(starttls=False), smtp_ca_file=str(pki["ca"]))
        job = _still_pending(engine, reward_id)
        assert "does not offer AUTH" in job.last_error and "starttls=true" in job.last_error
        assert server.handler.logins == [] and not server.handler.to(org.member_email)


@pytest.mark.parametrize(("mode", "cert", "why"), [
    ("starttls", "untrusted", "unable to get local issuer certificate"),
    ("smtps", "untrusted", "unable to get local issuer certificate"),
    ("starttls", "wrong-name", "IP address mismatch"),
    ("smtps", "wrong-name", "IP address mismatch"),
])
def test_certificate_check_refuses_the_server(mode, cert, why, pki, org, http, fast, drain, engine):
    """An untrusted certificate, or one for another name: no login, no message, a clear error."""
    with TlsSink(mode, pki[cert]) as server:
        reward_id = place(http, org.member_email)["rewards"][0]["id"]
        _one_drain(fast, drain, smtp_url=server.url(), smtp_ca_file=str(pki["ca"]))
        job = _still_pending(engine, reward_id)
        assert "TLS certificate not trusted" in job.last_error and why in job.last_error, job.last_error
        assert server.handler.logins == [] and server.handler.received == []


def test_starttls_asked_but_not_offered_sends_nothing_in_clear(org, http, fast, drain, engine, sink):
    """A plain server (or something stripping STARTTLS): the message is not sent unencrypted."""
    reward_id = place(http, org.member_email)["rewards"][0]["id"]
    _one_drain(fast, drain, smtp_url=f"smtp://{USER}:pw@127.0.0.1:{sink.port}?starttls=true")
    job = _still_pending(engine, reward_id)
    assert "does not offer STARTTLS" in job.last_error and not sink.handler.to(org.member_email)


def test_missing_ca_file_is_a_clear_temporary_failure(pki, org, http, fast, drain, engine, tmp_path):
    with TlsSink("smtps", pki["good"]) as server:
        reward_id = place(http, org.member_email)["rewards"][0]["id"]
        _one_drain(fast, drain, smtp_url=server.url(), smtp_ca_file=str(tmp_path / "nowhere.pem"))
        job = _still_pending(engine, reward_id)
        assert "LARGESSE_SMTP_CA_FILE" in job.last_error and "nowhere.pem" in job.last_error
        assert server.handler.received == []


# --- the same through `largesse worker --once` and the environment ----------------------------


def _worker_once(database_url: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LARGESSE_") and k != "SSL_CERT_FILE"}
    base.update(LARGESSE_DATABASE_URL=database_url, LARGESSE_ENVIRONMENT="sandbox",
                LARGESSE_JOB_RETRY_BASE_SECONDS="60", **env)
    command = [str(Path(sys.executable).parent / "largesse"), "worker", "--once"]
    return subprocess.run(command, env=base, capture_output=True, text=True, timeout=120)


def test_worker_process_trusts_the_ca_from_the_environment(pki, org, http, engine, database_url):
    """Untrusted without a setting; trusted through LARGESSE_SMTP_CA_FILE, then SSL_CERT_FILE."""
    with TlsSink("smtps", pki["good"]) as server:
        first = place(http, org.member_email)["rewards"][0]["id"]
        untrusted = _worker_once(database_url, {"LARGESSE_SMTP_URL": server.url()})
        assert untrusted.returncode == 0, untrusted.stdout + untrusted.stderr
        assert "TLS certificate not trusted" in _still_pending(engine, first).last_error

        set_job(engine, first, run_after=utcnow())
        outcome = {}
        for variable in ("LARGESSE_SMTP_CA_FILE", "SSL_CERT_FILE"):
            reward_id = first if not outcome else place(http, org.member_email)["rewards"][0]["id"]
            run = _worker_once(database_url, {"LARGESSE_SMTP_URL": server.url(), variable: str(pki["ca"])})
            assert run.returncode == 0, run.stdout + run.stderr
            outcome[variable] = reward_row(engine, reward_id).delivery_status
        assert outcome == {"LARGESSE_SMTP_CA_FILE": "SUCCEEDED", "SSL_CERT_FILE": "SUCCEEDED"}
        assert len(server.handler.to(org.member_email)) == 2
