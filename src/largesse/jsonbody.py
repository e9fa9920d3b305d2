"""Request bodies read by hand: exact numbers (money.loads_exact), an empty body as {}.

For endpoints whose bodies are unions the client sends in several shapes (fraud rule
configs, report filters): they validate the plain dict themselves and raise BadRequest with
a payload that mirrors the request keys.
"""

from __future__ import annotations

from typing import Any

from largesse.errors import BadRequest
from largesse.money import loads_exact


def read_object(raw: bytes) -> dict[str, Any]:
    """The body as a dict; {} for an empty body (the client sends one for optional bodies)."""
    if not raw.strip():
        return {}
    try:
        data = loads_exact(raw)
    except (ValueError, RecursionError):
        raise BadRequest("Malformed JSON body", {"base": ["is not valid JSON"]}) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadRequest("The body must be a JSON object", {"base": ["must be a JSON object"]})
    return data


def problem(path: tuple, message: str) -> BadRequest:
    """A 400 whose payload holds message at path, e.g. ("config", "ips", "3")."""
    from largesse.errors import nest

    where = ".".join(str(p) for p in path)
    return BadRequest(f"{where}: {message}" if where else message, nest(path, message))
