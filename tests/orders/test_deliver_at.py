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
                           ("2026-12-01Tnoon", "date-time"), ("tomorrow", "date")):
        errors = error(http.post("/orders", json=order_body(org.member_email, deliver_at=value)), 400)
        assert list(errors["payload"]["reward"]) == ["deliver_at"], errors
        assert message in errors["payload"]["reward"]["deliver_at"][0], errors
    assert snapshot(http) == before
