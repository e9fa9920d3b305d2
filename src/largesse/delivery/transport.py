"""Getting a rendered message out: SMTP (LARGESSE_SMTP_URL) or a Maildir (LARGESSE_MAIL_DIR).

Failures are classified once, here, because the worker's whole retry policy hangs on it:
- permanent (DeliveryError.permanent): the server refused this recipient or this message
  with a 5xx reply at RCPT or DATA. Retrying cannot help; the reward's delivery FAILS.
- temporary: 4xx replies, refused or dropped connections, timeouts, and 5xx replies that
  are about our own configuration (authentication, sender address): the operator can fix
  those, and the rewards should go out once they do rather than all fail at once.

An SMTP connection is kept open per worker thread and reused for the next message: a
connect + EHLO (+ STARTTLS + AUTH) per email would cost more than the email itself.

TLS (smtps://, or smtp://...?starttls=true) always verifies the server's certificate and
name against the system's CAs plus LARGESSE_SMTP_CA_FILE (a private CA); there is no switch
to turn verification off. A TLS problem (untrusted certificate, STARTTLS not offered) and a
refused login are temporary failures like any other configuration problem: nothing is sent
in clear, and the rewards go out once the operator fixes the setting.
"""

from __future__ import annotations

import logging
import mailbox
import smtplib
import ssl
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger("largesse.delivery")

# Sandbox test recipients (docs/sandbox.md): the +tag of the local part picks the outcome.
SANDBOX_FAIL_TAG = "fail"
SANDBOX_TEMPFAIL_TAG = "tempfail"
SANDBOX_TEMPFAIL_ATTEMPTS = 2


class DeliveryError(Exception):
    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.permanent = permanent


def plus_tag(address: str) -> str | None:
    local = address.rpartition("@")[0]
    return local.split("+", 1)[1].lower() if "+" in local else None


def sandbox_outcome(address: str, attempt: int) -> None:
    """Raise the failure a sandbox test recipient asks for; return for everyone else."""
    tag = plus_tag(address)
    if tag == SANDBOX_FAIL_TAG:
        raise DeliveryError("550 5.1.1 sandbox test recipient (+fail): mailbox unavailable", permanent=True)
    if tag == SANDBOX_TEMPFAIL_TAG and attempt <= SANDBOX_TEMPFAIL_ATTEMPTS:
        raise DeliveryError(f"451 4.3.0 sandbox test recipient (+tempfail): try again later "
                            f"(attempt {attempt} of {SANDBOX_TEMPFAIL_ATTEMPTS} that fail)", permanent=False)


class _Dropped(Exception):
    """The connection went away under us (maybe an idle connection the server closed)."""


class MaildirTransport:
    """Writes each message as a file in a Maildir (tmp/ then rename to new/): atomic, safe
    for several processes, and readable by mutt, Thunderbird, or `ls var/mail/new`."""

    def __init__(self, path: str):
        # mailbox.Maildir(create=True) makes tmp/new/cur only when the directory is new; an
        # existing empty directory (a mounted volume, say) needs them too.
        for sub in ("tmp", "new", "cur"):
            (Path(path) / sub).mkdir(parents=True, exist_ok=True)
        self.box = mailbox.Maildir(path, create=False)

    def send(self, message: EmailMessage) -> None:
        try:
            self.box.add(message)
        except OSError as exc:
            raise DeliveryError(f"cannot write to the Maildir: {exc}", permanent=False) from exc

    def close(self) -> None:
        pass


class SmtpTransport:
    def __init__(self, url: str, *, timeout: float = 30.0, ca_file: str | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError("LARGESSE_SMTP_URL must start with smtp:// or smtps://")
        query = {k: v[-1].lower() for k, v in parse_qs(parts.query).items()}
        self.ssl = parts.scheme == "smtps"
        self.starttls = query.get("starttls") in ("1", "true", "yes")
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (465 if self.ssl else 25)
        self.user = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.timeout = timeout
        self.ca_file = ca_file
        self.conn: smtplib.SMTP | None = None

    @property
    def where(self) -> str:
        return f"SMTP {self.host}:{self.port}"

    def _tls_context(self) -> ssl.SSLContext:
        """The system's CAs (or SSL_CERT_FILE's) plus the operator's private CA, if any."""
        context = ssl.create_default_context()
        if self.ca_file:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise DeliveryError(f"LARGESSE_SMTP_CA_FILE {self.ca_file}: {exc}", permanent=False) from None
        return context

    def _connect(self) -> smtplib.SMTP:
        context = self._tls_context() if self.ssl or self.starttls else None
        conn = None
        try:
            if self.ssl:
                conn = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
            else:
                conn = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
                if self.starttls:
                    conn.ehlo()
                    if not conn.has_extn("starttls"):
                        raise DeliveryError(f"{self.where} does not offer STARTTLS (starttls=true in "
                                            f"LARGESSE_SMTP_URL); nothing was sent in clear", permanent=False)
                    conn.starttls(context=context)
            if self.user:
                self._login(conn)
            return conn
        except BaseException:
            if conn is not None:  # do not leave a half-open connection (and its socket) behind
                conn.close()
            raise

    def _login(self, conn: smtplib.SMTP) -> None:
        conn.ehlo_or_helo_if_needed()
        if not conn.has_extn("auth"):
            # Typical of a server that allows AUTH only over TLS: smtplib sends no password then.
            hint = "" if self.ssl or self.starttls else " (it may require TLS: add ?starttls=true or use smtps://)"
            raise DeliveryError(f"{self.where} does not offer AUTH on this connection{hint}", permanent=False)
        try:
            conn.login(self.user, self.password or "")
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"{self.where} refused the login of {self.user!r}: "
                                f"{_reply(exc.smtp_code, exc.smtp_error)}", permanent=False) from None

    def send(self, message: EmailMessage) -> None:
        reused = self.conn is not None
        try:
            self._send_once(message)
        except _Dropped:
            self.close()
            if not reused:
                raise DeliveryError("the SMTP server closed the connection", permanent=False) from None
            # The server had dropped our idle connection: one fresh attempt now.
            try:
                self._send_once(message)
            except _Dropped:
                self.close()
                raise DeliveryError("the SMTP server closed the connection", permanent=False) from None

    def _send_once(self, message: EmailMessage) -> None:
        try:
            if self.conn is None:
                self.conn = self._connect()
            refused = self.conn.send_message(message)
        except (smtplib.SMTPServerDisconnected, ConnectionResetError, BrokenPipeError):
            raise _Dropped() from None
        except smtplib.SMTPRecipientsRefused as exc:
            self._reset()
            code, text = next(iter(exc.recipients.values()))
            raise DeliveryError(_reply(code, text), permanent=500 <= code < 600) from None
        except ssl.SSLCertVerificationError as exc:
            self.close()
            raise DeliveryError(f"{self.where}: TLS certificate not trusted ({exc.verify_message}); trust a private "
                                f"CA with LARGESSE_SMTP_CA_FILE", permanent=False) from None
        except smtplib.SMTPResponseException as exc:
            # DATA refused with 5xx: this message is refused. Sender/auth refusals: our config.
            self._reset()
            permanent = isinstance(exc, smtplib.SMTPDataError) and 500 <= exc.smtp_code < 600
            raise DeliveryError(_reply(exc.smtp_code, exc.smtp_error), permanent=permanent) from None
        except (OSError, smtplib.SMTPException) as exc:
            self.close()
            raise DeliveryError(f"{self.where} unavailable: {exc or type(exc).__name__}",
                                permanent=False) from None
        if refused:
            code, text = next(iter(refused.values()))
            raise DeliveryError(_reply(code, text), permanent=500 <= code < 600)

    def _reset(self) -> None:
        """After a refused message, RSET keeps the connection usable for the next one."""
        try:
            if self.conn is not None:
                self.conn.rset()
        except Exception:
            self.close()

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.quit()
            except Exception:
                try:
                    conn.close()
                except Exception:
                    pass


def _reply(code: int, text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"SMTP {code} {text}".strip()


def open_transport(settings) -> MaildirTransport | SmtpTransport:
    if settings.smtp_url:
        return SmtpTransport(settings.smtp_url, timeout=settings.smtp_timeout_seconds, ca_file=settings.smtp_ca_file)
    return MaildirTransport(settings.mail_dir)
