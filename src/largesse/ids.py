"""Identifiers: random, 14 characters of [A-Z0-9] (about 72 bits).

The tremendous-python client requires IDs that start with four characters of
[A-Z0-9]; using only that alphabet keeps every ID valid for it.
"""

import secrets
import string

ALPHABET = string.ascii_uppercase + string.digits
ID_LENGTH = 14


_SPACE = len(ALPHABET) ** ID_LENGTH


def new_id() -> str:
    # One draw from the OS's CSPRNG per ID (not one per character: that showed in profiles).
    n = secrets.randbelow(_SPACE)
    chars = []
    for _ in range(ID_LENGTH):
        n, digit = divmod(n, 36)
        chars.append(ALPHABET[digit])
    return "".join(chars)
