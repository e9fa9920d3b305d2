"""The one rule of what an email address is, for every surface that takes one: recipients of
orders and resends, members (API, CLI, dashboard, connected organizations), sign-in, custom fields
of type Email and fraud-rule lists. An address a rule cannot list must not be one an order can
reach (fraud rules refused 300-character local parts that orders took).

Per RFC 5321: a local part of 1-64 characters without spaces, quotes or separators, a domain of
two or more DNS labels of 1-63 letters, digits and inner hyphens, 254 characters in all.
"""

from __future__ import annotations

import re
import string

MAX_LENGTH = 254
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DOMAIN = re.compile(_LABEL + r"(?:\." + _LABEL + r")+")
_ADDRESS = re.compile(r"[^@\s\"'<>(),;:\\]{1,64}@" + DOMAIN.pattern)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def valid(address: str) -> bool:
    return len(address) <= MAX_LENGTH and _ADDRESS.fullmatch(address) is not None


def folded(text: str) -> str:
    """Lower case for ASCII letters only, as addresses compare: a non-ASCII letter whose lower
    case is ASCII (KELVIN SIGN "\u212a") names another mailbox, never "k"'s."""
    return text.translate(_ASCII_LOWER)
