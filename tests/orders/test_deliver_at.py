"""deliver_at: a date, or a date-time whose time part is ignored (API.md §2.1), such as what
JavaScript's Date#toISOString() produces."""

from __future__ import annotations

from datetime import timedelta

import pytest

from largesse.timeutil import utcnow
from tests.factories import error, ok, order_body, snapshot


@pytest.mark.parametrize("form", ["{d}T00:00:00.000Z", "{d}T18:45:12.345Z", "{d}T09:00:00+02:00", "{d}"])
def test_date_time_counts_as_its_date(org, api, http, form):
    day = (utcnow() + timedelta(days=3)).date()
    order = ok(http.post("/orders", json=order_body(org.member_email, deliver_at=form.format(d=day.isoformat()))))
    reward = order["order"]["rewards"][0]
    assert reward["deliver_at"] == day.isoformat() and reward["delivery"]["status"] == "SCHEDULED"
    assert api.get_reward(reward["id"]).reward.deliver_at == day


def test_bad_or_past_deliver_at_is_400(org, http):
    before = snapshot(http)
    yesterday = (utcnow() - timedelta(days=2)).date().isoformat()
    for value, message in ((f"{yesterday}T00:00:00.000Z", "between today"), ("2026-13-01T00:00:00Z", "date"),
                           ("2026-12-01Tnoon", "date-time"), ("tomorrow", "date"),
                           # Unix seconds or milliseconds, and digits run together, are not dates.
                           (1796083200, "date"), ("1796083200", "date"), (1796083200000, "date"),
                           (20261201, "date"), ("20261201", "date"), (True, "date"), ([], "date")):
        errors = error(http.post("/orders", json=order_body(org.member_email, deliver_at=value)), 400)
        assert list(errors["payload"]["reward"]) == ["deliver_at"], errors
        assert message in errors["payload"]["reward"]["deliver_at"][0], errors
    assert snapshot(http) == before


def test_a_scheduled_rewards_expiry_runs_from_its_delivery_day(org, http, cli):
    """It must not expire, refunded and never sent, before the day it is sent."""
    cli("org", "settings", "--org", org.id, "--reward-expiry-days", "30")
    day = (utcnow() + timedelta(days=60)).date()
    reward = ok(http.post("/orders", json=order_body(org.member_email, deliver_at=day.isoformat())))["order"][
        "rewards"][0]
    assert reward["delivery"]["status"] == "SCHEDULED"
    assert reward["expires_at"].startswith((day + timedelta(days=30)).isoformat() + "T00:00:00"), reward
    now = ok(http.post("/orders", json=order_body(org.member_email)))["order"]["rewards"][0]
    assert now["expires_at"][:10] == (utcnow() + timedelta(days=30)).date().isoformat()
