"""The official Node client (tremendous 4.12, from package-lock.json) against the server: every
response must fit the stricter types it declares (dist/api.d.ts), e.g. a key typed optional
but not nullable is left out, never null. The checks run in JavaScript (tests/node/)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from largesse import auth, db
from largesse.orders import approvals
from tests.conftest import GIFT_CARD_USD, failing
from tests.factories import ok, order_body, place
from tests.fraud.conftest import link_reward, redeem
from tests.redemption.conftest import fake_ip

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "node" / "client_check.js"
CLIENT = ROOT / "node_modules" / "tremendous" / "dist" / "api.d.ts"


def _run(org, **extra) -> dict:
    if shutil.which("node") is None or not CLIENT.exists():
        pytest.fail("node and node_modules (make node_modules/.installed: npm ci) are needed for this test")
    args = {"base_url": org.base_url, "api_key": org.api_key, "member_email": org.member_email,
            "product": GIFT_CARD_USD, **extra}
    result = subprocess.run(["node", str(SCRIPT), json.dumps(args)], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    assert result.returncode == 0 and "error" not in report, report
    return report


def test_every_response_fits_the_node_clients_types(org, engine, http, deliver):
    with db.write(engine) as conn:
        _, read_only = auth.issue_key(conn, organization_id=org.id, permission="read_only")
    failed = ok(http.post("/orders", json=order_body(failing(org.member_email))))["order"]
    deliver()  # its delivery fails, so that the script can cancel it
    null_rule = ok(http.post("/campaigns", json={
        "name": "Null rule", "products": [GIFT_CARD_USD],
        "auto_add_product_rule": {"enabled": True, "countries": None, "currencies": None}}))["campaign"]
    ok(http.post("/fraud_rules/review_ip", json={"config": {"ips": ["10.0.0.0/8"]}}))
    flagged, link = link_reward(org)
    assert "under review" in redeem(link, ip=fake_ip())  # 10.x: a private address, no country
    report = _run(org, read_only_key=read_only, failed_order=failed["id"], failed_reward=failed["rewards"][0]["id"],
                  null_rule_campaign=null_rule["id"], flagged_reward=flagged)
    assert len(report["calls"]) >= 45, report["calls"]
    called = {c["name"] for c in report["calls"]}
    assert {"listFraudRules", "createInvoice", "createTopup", "getReport", "createConnectedOrganizationMemberSession",
            "createOrganization", "createApiKey", "createMember"} <= called, called
    assert report["problems"] == [], "\n".join(report["problems"])


def test_approvals_through_the_node_client(org, engine):
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
    report = _run(org, approvals=True)
    assert report["problems"] == [], "\n".join(report["problems"])
    assert {"name": "approveOrder(rejected)", "status": 422} in report["calls"]


def test_the_node_client_gets_iso_8601_from_a_default_server(org, make_server):
    """LARGESSE_REWARD_LIST_TIMESTAMPS=auto (the default; the test servers say iso8601): the
    Node client, as the Python one, gets ISO 8601 in GET /rewards."""
    server = make_server(reward_list_timestamps="auto")
    moved = replace(org, base_url=server.url)
    with moved.http() as http:
        place(http, org.member_email)
    report = _run(moved, list_rewards=True)
    assert report["problems"] == [], "\n".join(report["problems"])
    assert report["calls"] == [{"name": "listRewards", "status": 200}]


def test_link_reward_without_email_has_no_email_key(org, http, api):
    body = order_body(org.member_email, method="LINK")
    body["reward"]["recipient"] = {"name": "No Email"}
    reward = ok(http.post("/orders", json=body))["order"]["rewards"][0]
    assert reward["recipient"] == {"name": "No Email"}
    assert ok(http.get(f"/rewards/{reward['id']}"))["reward"]["recipient"] == {"name": "No Email"}
    assert api.get_reward(reward["id"]).reward.recipient.email is None


def test_the_checker_catches_what_the_declarations_forbid():
    """The JavaScript checker itself: null in an optional, non-nullable key, a missing required
    key, a wrong scalar type and an unknown enum value are each reported."""
    script = """
      const { checker } = require("./tests/node/declared_types.js");
      const { check } = checker();
      const reward = { id: "R1", recipient: { name: null, email: null }, value: { denomination: "5" } };
      const order = { id: "O1", created_at: "2026-01-01T00:00:00.000Z", status: "SHIPPED" };
      const rule = { rule_type: "review_ip", config: null };
      process.stdout.write(JSON.stringify([check({ reward }, "GetReward200Response"),
                                           check({ order }, "GetOrder200Response"),
                                           check({ order: { ...order, status: "PENDING APPROVAL" } },
                                                 "GetOrder200Response"),
                                           // The enum after an object type ending "} | null;" is read too.
                                           check({ fraud_rules: [rule] }, "ListFraudRules200Response"),
                                           check({ fraud_rules: [{ ...rule, rule_type: "review_moon" }] },
                                                 "ListFraudRules200Response")]));
    """
    result = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    reward_problems, order_problems, fine, rule_fine, rule_problems = json.loads(result.stdout)
    assert rule_fine == [], rule_fine
    assert any("review_moon" in p for p in rule_problems), rule_problems
    assert any("recipient.email: null" in p for p in reward_problems), reward_problems
    assert not any("recipient.name" in p for p in reward_problems), reward_problems  # name is nullable
    assert any("denomination: string" in p for p in reward_problems), reward_problems
    assert any("SHIPPED" in p for p in order_problems), order_problems
    assert fine == []
