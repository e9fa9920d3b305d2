"""Redemption link tokens: 256 random bits, shown once in a link, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import Connection, select, update

from largesse.orders.models import rewards
from largesse.orgs.models import organizations
from largesse.redemption.models import redemption_tokens
from largesse.timeutil import utcnow


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_tokens(reward_ids: list[str]) -> tuple[dict[str, str], list[dict]]:
    """Fresh tokens ({reward_id: token}) and the redemption_tokens rows that store their hashes."""
    now = utcnow()
    tokens = {reward_id: secrets.token_urlsafe(32) for reward_id in reward_ids}
    rows = [{"token_hash": hash_token(token), "reward_id": reward_id, "created_at": now}
            for reward_id, token in tokens.items()]
    return tokens, rows


def issue_many(conn: Connection, reward_ids: list[str]) -> dict[str, str]:
    """A fresh token per reward, in the caller's transaction; returns {reward_id: token}."""
    if not reward_ids:
        return {}
    tokens, rows = new_tokens(reward_ids)
    conn.execute(redemption_tokens.insert(), rows)
    return tokens


def issue(conn: Connection, reward_id: str, *, revoke_others: bool = False) -> str:
    if revoke_others:
        conn.execute(
            update(redemption_tokens)
            .where(redemption_tokens.c.reward_id == reward_id, redemption_tokens.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
    return issue_many(conn, [reward_id])[reward_id]


def reward_for(conn: Connection, token: str, environment: str) -> str | None:
    """The reward a live token belongs to, or None (unknown or revoked, or a reward of an
    organization of the other environment: a sandbox server never redeems a production reward
    for a test code, nor a production server a sandbox one, when both share a database)."""
    if not token or len(token) > 200:
        return None
    return conn.execute(
        select(redemption_tokens.c.reward_id)
        .join(rewards, rewards.c.id == redemption_tokens.c.reward_id)
        .join(organizations, organizations.c.id == rewards.c.organization_id)
        .where(redemption_tokens.c.token_hash == hash_token(token), redemption_tokens.c.revoked_at.is_(None),
               organizations.c.environment == environment)
    ).scalar()


def link(public_url: str, token: str) -> str:
    return f"{public_url}/redeem/{token}"
