"""Getting a rendered message out: SMTP (LARGESSE_SMTP_URL) or a Maildir (LARGESSE_MAIL_DIR).

Failures are classified once, here, because the worker's whole retry policy hangs on it:
- permanent (DeliveryError.permanent): the server refused this recipient or this message
  with a 5xx reply at RCPT or DATA. Retrying cannot help; the reward's delivery FAILS.
- temporary: 4xx replies, refused or dropped connections, timeouts, and 5xx replies that
  are about our own configuration (authentication, sender address): the operator can fix
  those, and the rewards should go out once they do rather than all fail at once.

An SMTP connection is kept open per worker thread and reused for the next message: a
connect + EHLO (+ STARTTLS + AUTH) per email would cost more than the email itself. With a
server that offers PIPELINING (RFC 2920), MAIL, RCPT and DATA go out in one write and the
message in a second: two round trips per email instead of four. The replies are read and
classified exactly as smtplib.sendmail would (the same exceptions, so the same outcomes).

Messages arrive here as bytes with their envelope (Outgoing: compose.py builds them
directly); an EmailMessage (the dashboard's sign-in email) is flattened into one first, as
smtplib.send_message would.

TLS (smtps://, or smtp://...?starttls=true) always verifies the server's certificate and
name against the system's CAs plus LARGESSE_SMTP_CA_FILE (a private CA); there is no switch
to turn verification off. A TLS problem (untrusted certificate, STARTTLS not offered) and a
refused login are temporary failures like any other configuration problem: nothing is sent
in clear, and the rewards go out once the operator fixes the setting.
"""

from __future__ import annotations

import io
import logging
import mailbox
import re
import smtplib
import ssl
from dataclasses import dataclass
from email.generator import BytesGenerator
from email.message import EmailMessage
from email.utils import getaddresses
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from largesse.config import ON_OFF_WORDS, on_off

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


@dataclass(frozen=True)
class Outgoing:
    """A message ready to go: its envelope and its bytes (CRLF line ends, not dot-stuffed)."""

    mail_from: str
    recipients: tuple[str, ...]
    data: bytes
    smtputf8: bool = False  # an address is not ASCII: the server must offer SMTPUTF8

    @classmethod
    def from_message(cls, msg: EmailMessage) -> Outgoing:
        """An EmailMessage as smtplib.send_message sends it: envelope from From and To, the
        bytes flattened by its policy (with utf8 when an address is not ASCII)."""
        mail_from = getaddresses([msg["Sender"] or msg["From"]])[0][1]
        recipients = tuple(addr for _, addr in getaddresses(msg.get_all("To", [])))
        utf8 = not "".join((mail_from, *recipients)).isascii()
        buffer = io.BytesIO()
        BytesGenerator(buffer, policy=msg.policy.clone(utf8=True) if utf8 else None).flatten(msg, linesep="\r\n")
        return cls(mail_from, recipients, buffer.getvalue(), utf8)

    def as_message(self) -> EmailMessage:
        """The message parsed back (the dashboard's preview, tests)."""
        import email
        import email.policy

        return email.message_from_bytes(self.data, policy=email.policy.default)


def outgoing(message: Outgoing | EmailMessage) -> Outgoing:
    return message if isinstance(message, Outgoing) else Outgoing.from_message(message)


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

    def send(self, message: Outgoing | EmailMessage) -> None:
        try:
            # As mailbox writes an EmailMessage: LF line ends.
            self.box.add(outgoing(message).data.replace(b"\r\n", b"\n"))
        except OSError as exc:
            raise DeliveryError(f"cannot write to the Maildir: {exc}", permanent=False) from exc

    def close(self) -> None:
        pass


class SmtpTransport:
    def __init__(self, url: str, *, timeout: float = 30.0, ca_file: str | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError("LARGESSE_SMTP_URL must start with smtp:// or smtps://")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"starttls"})
        if unknown:
            raise ValueError(f"LARGESSE_SMTP_URL takes one query parameter, starttls; not {', '.join(unknown)}")
        self.ssl = parts.scheme == "smtps"
        # Read as every on/off setting is, and refused otherwise: `starttls=on` read as off sent
        # the password and the mail in clear.
        self.starttls = on_off(query["starttls"][-1]) if "starttls" in query else False
        if self.starttls is None:
            raise ValueError(f"LARGESSE_SMTP_URL's starttls must be {ON_OFF_WORDS}, not {query['starttls'][-1]!r}")
        if not parts.hostname:  # smtp:// alone silently meant localhost:25
            raise ValueError(f"LARGESSE_SMTP_URL names no host: use {parts.scheme}://HOST:PORT, "
                             f"e.g. {parts.scheme}://127.0.0.1:{465 if parts.scheme == 'smtps' else 25}")
        self.host = parts.hostname
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

    def send(self, message: Outgoing | EmailMessage) -> None:
        message = outgoing(message)
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

    def _send_once(self, message: Outgoing) -> None:
        try:
            if self.conn is None:
                self.conn = self._connect()
            refused = _sendmail(self.conn, message)
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


_LEADING_DOT = re.compile(rb"(?m)^\.")


def _sendmail(conn: smtplib.SMTP, message: Outgoing) -> dict:
    """smtplib's sendmail (with send_message's SMTPUTF8 handling), pipelined when the server
    offers it: the same replies raise the same exceptions, and a refused message leaves the
    connection reset (RSET) for the next one. Returns the refused recipients (some refused,
    others accepted), as sendmail does."""
    conn.ehlo_or_helo_if_needed()
    utf8 = ["SMTPUTF8", "BODY=8BITMIME"] if message.smtputf8 else []
    if utf8 and not conn.has_extn("smtputf8"):
        raise smtplib.SMTPNotSupportedError(
            "One or more source or delivery addresses require internationalized email support, but the "
            "server does not advertise the required SMTPUTF8 capability")
    if not (conn.does_esmtp and conn.has_extn("pipelining")):
        return conn.sendmail(message.mail_from, list(message.recipients), message.data, utf8)
    data = message.data
    options = ([f"size={len(data)}"] if conn.has_extn("size") else []) + utf8
    encoding = "utf-8" if message.smtputf8 else "ascii"
    option_text = (" " + " ".join(options)) if options else ""
    commands = [f"mail FROM:{smtplib.quoteaddr(message.mail_from)}{option_text}\r\n"]
    commands += [f"rcpt TO:{smtplib.quoteaddr(rcpt)}\r\n" for rcpt in message.recipients]
    conn.send(("".join(commands) + "data\r\n").encode(encoding))
    mail_code, mail_reply = conn.getreply()
    rcpt_replies = [conn.getreply() for _ in message.recipients]
    data_code, data_reply = conn.getreply()
    if mail_code != 250:
        if data_code == 354:  # a server that took DATA all the same: end it empty
            conn.send(b".\r\n")
            conn.getreply()
        if mail_code == 421:
            conn.close()
        else:
            conn._rset()
        raise smtplib.SMTPSenderRefused(mail_code, mail_reply, message.mail_from)
    refused = {rcpt: reply for rcpt, reply in zip(message.recipients, rcpt_replies, strict=True)
               if reply[0] not in (250, 251)}
    if len(refused) == len(message.recipients) or data_code != 354:
        if data_code == 354:
            conn.send(b".\r\n")
            conn.getreply()
        if 421 in (data_code, *(code for code, _ in refused.values())):
            conn.close()
        else:
            conn._rset()
        if len(refused) == len(message.recipients):
            raise smtplib.SMTPRecipientsRefused(refused)
        raise smtplib.SMTPDataError(data_code, data_reply)
    body = _LEADING_DOT.sub(b"..", data)
    if body[-2:] != b"\r\n":
        body += b"\r\n"
    conn.send(body + b".\r\n")
    code, reply = conn.getreply()
    if code != 250:
        if code == 421:
            conn.close()
        else:
            conn._rset()
        raise smtplib.SMTPDataError(code, reply)
    return refused


def _reply(code: int, text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"SMTP {code} {text}".strip()


def open_transport(settings) -> MaildirTransport | SmtpTransport:
    if settings.smtp_url:
        return SmtpTransport(settings.smtp_url, timeout=settings.smtp_timeout_seconds, ca_file=settings.smtp_ca_file)
    return MaildirTransport(settings.mail_dir)
