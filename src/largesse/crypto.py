"""Secrets at rest that must be read back: Fernet-encrypted under keys derived from
LARGESSE_SECRET_KEY. Webhook signing keys (webhooks/) and the bank account of a redemption held
for fraud review (redemption/recipient.py, fraud/) use it, each under its own purpose label.

A signing key has to be usable to sign, so it cannot be hashed like an API key; instead the
database holds only a Fernet token (AES-128-CBC + HMAC-SHA256, from `cryptography`) and the
key that opens it lives outside the database. A dump of the database alone signs nothing.

- LARGESSE_SECRET_KEY may hold several comma-separated secrets: the first encrypts, all
  decrypt (MultiFernet). Rotation: put the new secret first, keep the old one after it; each
  webhook's key is re-encrypted under the new secret the next time it is used (a delivery or
  a read-write read), after which the old secret can be dropped (docs/webhooks.md).
- Each secret becomes a Fernet key through HKDF-SHA256 with a purpose label, so the same
  secret also feeding the redemption CSRF key (redemption/security.py) yields unrelated keys.
  The bank details of a redemption held for fraud review (redemption/recipient.py) use this
  facility with their own label (RECIPIENT_DETAILS), the same secrets and key file.
- Unset (a laptop): a random secret is generated once into a key file beside the SQLite
  database (or var/ for PostgreSQL) and a warning says production must set the variable.
  The file's content is a secret like any other: `LARGESSE_SECRET_KEY=<new>,<file content>`
  moves a laptop database to an explicit key.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy.engine import make_url

log = logging.getLogger("largesse")

KEY_FILE_NAME = "largesse-secret.key"
_PURPOSE = b"largesse webhook signing keys v1"
RECIPIENT_DETAILS = b"largesse held recipient details v1"


class KeyUnavailable(Exception):
    """A stored key cannot be decrypted with the configured secrets (wrong LARGESSE_SECRET_KEY)."""


def fernet_key(secret: str, purpose: bytes = _PURPOSE) -> bytes:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret.encode())
    return base64.urlsafe_b64encode(derived)


class KeyBox:
    """Encrypts with the first secret, decrypts with any of them."""

    def __init__(self, secret_values: list[str], purpose: bytes = _PURPOSE, key_file: Path | None = None):
        if not secret_values:
            raise ValueError("at least one secret is needed")
        self.purpose = purpose
        self.key_file = key_file  # where the secret came from, when LARGESSE_SECRET_KEY is unset
        fernets = [Fernet(fernet_key(s, purpose)) for s in secret_values]
        self.primary = fernets[0]
        self.any = MultiFernet(fernets)

    def encrypt(self, plaintext: str) -> str:
        return self.primary.encrypt(plaintext.encode()).decode("ascii")

    def decrypt(self, token: str) -> tuple[str, bool]:
        """(plaintext, stale): stale when an older secret opened it (re-encrypt it)."""
        raw = token.encode("ascii")
        try:
            return self.primary.decrypt(raw).decode(), False
        except InvalidToken:
            pass
        try:
            return self.any.decrypt(raw).decode(), True
        except InvalidToken:
            what = "the webhook's signing key" if self.purpose == _PURPOSE else "the stored secret"
            if self.key_file is None:
                raise KeyUnavailable(f"{what} cannot be decrypted with LARGESSE_SECRET_KEY (was the secret it "
                                     "was encrypted with removed?); check LARGESSE_SECRET_KEY") from None
            # "check LARGESSE_SECRET_KEY" sent an operator to a variable they never set: the
            # usual cause is a database restored without its key file, or a process started in
            # another directory (the PostgreSQL default, var/, is relative to it).
            raise KeyUnavailable(
                f"{what} cannot be decrypted with the key file {self.key_file} (LARGESSE_SECRET_KEY is unset): "
                "restore the key file kept with the database's backup, or set LARGESSE_SECRET_KEY to the secret "
                "it was encrypted with") from None


def key_file_path(database_url: str) -> Path:
    """Where the generated secret lives when LARGESSE_SECRET_KEY is unset: beside a SQLite
    database file (so every process using that database finds it), else under var/."""
    try:
        url = make_url(database_url)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            return Path(url.database).parent / KEY_FILE_NAME
    except Exception:  # an unparsable URL fails elsewhere, with a better message
        pass
    return Path("var") / KEY_FILE_NAME


def load_or_create_secret(path: Path) -> str:
    """The key file's secret, creating the file atomically (tmp + link) if it is missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(32) + "\n")
            try:
                os.link(tmp, path)  # fails if another process created it first: theirs wins
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
        log.warning("LARGESSE_SECRET_KEY is unset: webhook signing keys and held bank details are encrypted "
                    "with a secret generated into %s. Production must set LARGESSE_SECRET_KEY (the same value "
                    "in every process).", path.resolve())
    value = path.read_text().strip()
    if not value:
        raise KeyUnavailable(f"the key file {path} is empty")
    return value


_boxes: dict[tuple, KeyBox] = {}
_boxes_lock = threading.Lock()


def keybox_for(secret_values: list[str], database_url: str, purpose: bytes = _PURPOSE) -> KeyBox:
    """The KeyBox of these secrets, or of the generated key file when there are none (cached)."""
    cache_key = (purpose, tuple(secret_values),
                 None if secret_values else str(key_file_path(database_url).resolve()))
    box = _boxes.get(cache_key)
    if box is None:
        with _boxes_lock:
            box = _boxes.get(cache_key)
            if box is None:
                key_file = None if secret_values else key_file_path(database_url).resolve()
                values = secret_values or [load_or_create_secret(key_file)]
                box = _boxes[cache_key] = KeyBox(values, purpose, key_file)
    return box


def keybox(settings, purpose: bytes = _PURPOSE) -> KeyBox:
    return keybox_for(settings.secret_keys, settings.database_url, purpose)
