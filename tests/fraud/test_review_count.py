"""GET /fraud_reviews total_count at scale (docs/api.md, "total_count at scale"): exact when the
matches end within paging.COUNT_HORIZON reviews past the offset, otherwise the lower bound
offset + horizon + 1; every filter counts the same way. The horizon is lowered to 3 so that six
reviews show both sides (the server runs in this process)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import update

from largesse import db, paging
from largesse.fraud.models import fraud_reviews
from largesse.orders.models import rewards
from largesse.timeutil import iso
from tests.factories import ok
from tests.fraud.conftest import link_reward
from tests.redemption.conftest import GIFT_CARD

BASE = datetime(2026, 1, 1)


def test_total_count_is_exact_near_the_end_and_a_lower_bound_before(org, http, engine, monkeypatch):
    ids = [link_reward(org)[0] for _ in range(6)]
    with db.write(engine) as conn:
        # Review i redeemed i minutes after BASE (the list's order: newest redemption first),
        # its reward created i days before BASE (the reverse order: created_at filters pick
        # reviews the list does not hold together).
        conn.execute(fraud_reviews.insert(), [{
            "reward_id": reward_id, "organization_id": org.id, "status": "flagged" if i % 2 else "released",
            "reasons": ["IP on review list"], "risk": "medium", "product_id": GIFT_CARD, "ip": None, "country": None,
            "device_id": None, "redeemed_at": BASE + timedelta(minutes=i), "reviewed_by": None if i % 2 else "key",
            "reviewed_at": None if i % 2 else BASE, "reward_created_at": BASE - timedelta(days=i)}
            for i, reward_id in enumerate(ids)])
        for i, reward_id in enumerate(ids):
            conn.execute(update(rewards).where(rewards.c.id == reward_id).values(created_at=BASE - timedelta(days=i)))
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)

    def page(offset: int, **params) -> dict:
        return ok(http.get("/fraud_reviews", params={"limit": 2, "offset": offset, **params}))

    def listed(body: dict) -> list[str]:
        return [r["reward"]["id"] for r in body["fraud_reviews"]]

    newest_first = list(reversed(ids))
    assert page(0)["total_count"] == 4  # 0 + 3 + 1: more than the page, fewer than the 6 reviews
    assert page(2)["total_count"] == 6 and page(4)["total_count"] == 6  # within 3 past the offset: exact
    assert page(10) == {"fraud_reviews": [], "total_count": 6}  # past the end: exact
    seen, offset = [], 0
    while True:  # paging until offset >= total_count reaches every review, newest redemption first
        body = page(offset)
        seen += listed(body)
        offset += 2
        if offset >= body["total_count"]:
            break
    assert seen == newest_first
    flagged = page(0, status="flagged")
    assert flagged["total_count"] == 3 and listed(flagged) == [ids[5], ids[3]]
    assert all(r["status"] == "flagged" and "reviewed_by" not in r for r in flagged["fraud_reviews"])
    # created_at is the reward's: the three created last are the three redeemed first.
    created = page(0, **{"created_at[gte]": iso(BASE - timedelta(days=2))})
    assert created["total_count"] == 3 and listed(created) == [ids[2], ids[1]]
    assert listed(page(2, **{"created_at[gte]": iso(BASE - timedelta(days=2))})) == [ids[0]]
    assert page(0, **{"created_at[lte]": iso(BASE - timedelta(days=3))})["total_count"] == 3
    assert page(0, **{"created_at[lte]": "2000-01-01"}) == {"fraud_reviews": [], "total_count": 0}
    redeemed = page(0, **{"redeemed_at[gte]": iso(BASE + timedelta(minutes=2)),
                          "redeemed_at[lte]": iso(BASE + timedelta(minutes=4))})
    assert redeemed["total_count"] == 3 and listed(redeemed) == [ids[4], ids[3]]
    monkeypatch.setattr(paging, "COUNT_HORIZON", 1000)
    full = ok(http.get("/fraud_reviews", params={"limit": 100}))
    assert full["total_count"] == 6 and listed(full) == newest_first
    assert full["fraud_reviews"][0]["redemption_method"] and full["fraud_reviews"][0]["redeemed_at"]


def test_a_review_carries_its_rewards_creation_for_the_created_at_filter(org, http, engine):
    """A held redemption's review copies the reward's created_at (migration 0022), which the
    created_at filters read in the list's index walk."""
    from sqlalchemy import select

    from tests.dashboard.test_review_pages import held

    reward_id, _, _ = held(org)
    with db.read(engine) as conn:
        copied, created = conn.execute(
            select(fraud_reviews.c.reward_created_at, rewards.c.created_at)
            .join(rewards, rewards.c.id == fraud_reviews.c.reward_id)
            .where(fraud_reviews.c.reward_id == reward_id)).one()
    assert copied == created

    def found(**params) -> list[str]:
        return [r["reward"]["id"] for r in ok(http.get("/fraud_reviews", params=params))["fraud_reviews"]]

    assert reward_id in found(**{"created_at[gte]": iso(created)})
    assert reward_id in found(**{"created_at[lte]": iso(created + timedelta(seconds=1))})
    assert reward_id not in found(**{"created_at[lte]": iso(created - timedelta(seconds=1))})
    assert reward_id not in found(**{"created_at[gte]": iso(created + timedelta(seconds=1))})
