"""Identifiers: random, 14 characters of [A-Z0-9] (about 72 bits).

The tremendous-python client requires IDs that start with four characters of
[A-Z0-9]; using only that alphabet keeps every ID valid for it.
"""

import secrets
import string

ALPHABET = string.ascii_uppercase + string.digits
ID_LENGTH = 14


def new_id() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))


def looks_like_id(value: str) -> bool:
    return 4 <= len(value) <= 64 and all(c in ALPHABET for c in value)
