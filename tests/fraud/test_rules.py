"""Fraud rules through the official client: upsert, list, update_list, delete, validation."""

from __future__ import annotations

import pytest
from tremendous import (
    AllowEmail,
    AllowIp,
    FraudRuleRequest,
    FraudRuleRequestConfig,
    ReviewCountry,
    ReviewEmail,
    ReviewIp,
    ReviewRedeemedRewardsAmount,
    ReviewRedeemedRewardsCount,
    ReviewVpn,
    UpdateFraudRuleListRequest,
    UpdateFraudRuleListRequestConfig,
)
from tremendous.exceptions import BadRequestException, ForbiddenException, NotFoundException

from tests.factories import error, ok


def rule(config) -> FraudRuleRequest:
    return FraudRuleRequest(config=FraudRuleRequestConfig(config))


def rules_of(api) -> dict:
    return {r.rule_type: r.config for r in api.list_fraud_rules().fraud_rules}


def test_every_rule_type_is_stored_and_listed(api):
    assert api.list_fraud_rules().fraud_rules == []
    saved = [
        ("review_country", rule(ReviewCountry(type="blacklist", countries=["ru", "KP"]))),
        ("review_ip", rule(ReviewIp(ips=["203.0.113.7", "198.51.100.0/24", "2001:db8::/32"]))),
        ("review_email", rule(ReviewEmail(emails=["Bad@Example.com"], domains=["spam.test"]))),
        ("review_redeemed_rewards_count", rule(ReviewRedeemedRewardsCount(amount=3, period="30"))),
        ("review_redeemed_rewards_amount", rule(ReviewRedeemedRewardsAmount(amount=250.5, period="all_time"))),
        ("review_vpn", rule(ReviewVpn(skip_apple_private_relay=True))),
        ("allow_ip", rule(AllowIp(ips=["192.0.2.1"]))),
        ("allow_email", rule(AllowEmail(emails=["vip@example.com"]))),
    ]
    for rule_type, body in saved:
        assert "saved" in api.fraud_rule(rule_type, body).message
    for rule_type in ("review_multiple_emails", "review_previously_blocked_recipients", "review_tremendous_flaglist"):
        assert api.fraud_rule(rule_type).message  # no body at all, as the client sends it
    listed = rules_of(api)
    assert listed["review_country"] == {"type": "blacklist", "countries": ["RU", "KP"]}
    assert listed["review_ip"]["ips"] == ["203.0.113.7", "198.51.100.0/24", "2001:db8::/32"]
    assert listed["review_email"] == {"emails": ["bad@example.com"], "domains": ["spam.test"]}
    assert listed["review_redeemed_rewards_count"] == {"amount": 3, "period": "30"}
    assert listed["review_redeemed_rewards_amount"] == {"amount": 250.5, "period": "all_time"}
    assert listed["review_vpn"] == {"skip_apple_private_relay": True}
    assert listed["review_tremendous_flag_list"] == {}  # the 6.0 docstring's spelling is the same rule
    assert len(listed) == 11


def test_upsert_replaces_and_delete_removes(api, other_org):
    api.fraud_rule("review_ip", rule(ReviewIp(ips=["203.0.113.7"])))
    api.fraud_rule("review_ip", rule(ReviewIp(ips=["203.0.113.8"])))
    assert rules_of(api)["review_ip"] == {"ips": ["203.0.113.8"]}
    assert other_org.api().list_fraud_rules().fraud_rules == []  # another organization sees nothing
    with pytest.raises(NotFoundException):
        other_org.api().delete_fraud_rule("review_ip")
    assert "deleted" in api.delete_fraud_rule("review_ip").message
    assert "review_ip" not in rules_of(api)
    with pytest.raises(NotFoundException) as raised:
        api.delete_fraud_rule("review_ip")
    assert raised.value.data.errors.payload == {"rule_type": ["has no rule"]}


def test_update_list_adds_and_removes(api):
    api.fraud_rule("review_country", rule(ReviewCountry(type="whitelist", countries=["US"])))
    api.update_fraud_rule_list("review_country", UpdateFraudRuleListRequest.from_dict(
        {"operation": "add", "config": {"countries": ["ca", "GB", "US"]}}))
    assert rules_of(api)["review_country"] == {"type": "whitelist", "countries": ["US", "CA", "GB"]}
    api.update_fraud_rule_list("review_country", UpdateFraudRuleListRequest.from_dict(
        {"operation": "remove", "config": {"countries": ["US"]}}))
    assert rules_of(api)["review_country"]["countries"] == ["CA", "GB"]
    api.fraud_rule("allow_email", rule(AllowEmail(emails=["a@example.com"])))
    api.update_fraud_rule_list("allow_email", UpdateFraudRuleListRequest(
        operation="add", config=UpdateFraudRuleListRequestConfig(AllowEmail(emails=["B@example.com"]))))
    assert rules_of(api)["allow_email"] == {"emails": ["a@example.com", "b@example.com"]}
    with pytest.raises(NotFoundException):  # no such rule yet
        api.update_fraud_rule_list("review_ip", UpdateFraudRuleListRequest.from_dict(
            {"operation": "add", "config": {"ips": ["203.0.113.1"]}}))


def test_removing_the_last_entries_of_review_email_is_refused_like_its_create(api, http):
    """A review_email rule needs emails or domains (its create is 400 without): update_list
    cannot empty it either; 400 at the emptied list, nothing changes. DELETE removes the rule."""
    assert error(http.post("/fraud_rules/review_email", json={"config": {"emails": [], "domains": []}}),
                 400)["payload"] == {"config": ["needs emails or domains"]}
    api.fraud_rule("review_email", rule(ReviewEmail(emails=["a@example.com"], domains=["example.org"])))
    api.update_fraud_rule_list("review_email", UpdateFraudRuleListRequest.from_dict(
        {"operation": "remove", "config": {"domains": ["example.org"]}}))
    assert rules_of(api)["review_email"] == {"emails": ["a@example.com"], "domains": []}
    why = "would leave the rule without entries (it needs emails or domains); delete the rule instead"
    with pytest.raises(BadRequestException) as raised:
        api.update_fraud_rule_list("review_email", UpdateFraudRuleListRequest.from_dict(
            {"operation": "remove", "config": {"emails": ["A@example.com"]}}))
    assert raised.value.data.errors.payload == {"config": {"emails": [why]}}
    assert raised.value.data.errors.message == f"config.emails: {why}"
    assert error(http.post("/fraud_rules/review_email/update_list", json={"operation": "remove", "config": {
        "emails": ["a@example.com"], "domains": ["example.org"]}}), 400)["payload"] == {
        "config": {"emails": [why], "domains": [why]}}
    assert rules_of(api)["review_email"] == {"emails": ["a@example.com"], "domains": []}
    assert http.delete("/fraud_rules/review_email").status_code == 200
    assert "review_email" not in rules_of(api)


@pytest.mark.parametrize(("rule_type", "body", "payload"), [
    ("review_ip", {"config": {"ips": ["300.1.1.1"]}}, {"config": {"ips": {"0": ["is not an IPv4 or IPv6 address "
                                                                               "or CIDR range"]}}}),
    # A scoped IPv6 address names an interface of this host: no client ever has it.
    ("allow_ip", {"config": {"ips": ["8.8.8.8", "fe80::1%eth0"]}}, {"config": {"ips": {"1": [
        "is not an IPv4 or IPv6 address or CIDR range"]}}}),
    ("review_ip", {"config": {}}, {"config": {"ips": ["is required"]}}),
    ("review_country", {"config": {"type": "greylist", "countries": ["US"]}},
     {"config": {"type": ["must be whitelist or blacklist"]}}),
    ("review_country", {"config": {"type": "blacklist", "countries": ["USA"]}},
     {"config": {"countries": {"0": ["is not an ISO 3166-1 alpha-2 country code"]}}}),
    ("review_redeemed_rewards_count", {"config": {"amount": 0, "period": "30"}},
     {"config": {"amount": ["must be a whole number of at least 1"]}}),
    ("review_redeemed_rewards_count", {"config": {"amount": 10**12, "period": "7"}},
     {"config": {"amount": ["is too large (at most 1,000,000,000)"]}}),  # not "a whole number of at least 1"
    ("review_redeemed_rewards_amount", {"config": {"amount": 10**12, "period": "7"}},
     {"config": {"amount": ["is too large"]}}),  # past what an amount can be (money.to_cents)
    ("review_redeemed_rewards_count", {"config": {"amount": 2, "period": "31"}},
     {"config": {"period": ["must be one of 7, 30, 90, 120, 365, all_time"]}}),
    ("review_redeemed_rewards_amount", {"config": {"amount": 10.005, "period": "7"}},
     {"config": {"amount": ["must have at most 2 decimal places"]}}),
    ("review_redeemed_rewards_amount", {"config": {"amount": "10", "period": "7"}},
     {"config": {"amount": ["must be a number"]}}),
    ("review_email", {"config": {"emails": ["not-an-email"]}},
     {"config": {"emails": {"0": ["is not a valid email address"]}}}),
    ("review_vpn", {"config": {"skip_apple_private_relay": "yes"}},
     {"config": {"skip_apple_private_relay": ["must be true or false"]}}),
    ("review_multiple_emails", {"config": {"ips": ["1.1.1.1"]}}, {"config": ["review_multiple_emails takes no "
                                                                             "config"]}),
])
def test_invalid_configs_answer_400_and_change_nothing(http, rule_type, body, payload):
    problem = error(http.post(f"/fraud_rules/{rule_type}", json=body), 400)
    assert problem["payload"] == payload
    assert http.get("/fraud_rules").json() == {"fraud_rules": []}


def test_bad_update_list_and_unknown_rule_type(http, api):
    assert error(http.post("/fraud_rules/review_everything", json={}), 404)["payload"] == {
        "rule_type": ["is not a fraud rule type"]}
    api.fraud_rule("review_ip", rule(ReviewIp(ips=["203.0.113.7"])))
    assert error(http.post("/fraud_rules/review_ip/update_list", json={"operation": "merge", "config": {
        "ips": ["1.1.1.1"]}}), 400)["payload"] == {"operation": ["must be add or remove"]}
    assert error(http.post("/fraud_rules/review_ip/update_list", json={"operation": "add", "config": {
        "ips": ["1.1.1.1/99"]}}), 400)["payload"] == {"config": {"ips": {"0": [
            "is not an IPv4 or IPv6 address or CIDR range"]}}}
    assert error(http.post("/fraud_rules/review_vpn/update_list", json={"operation": "add", "config": {}}),
                 404)["message"]  # no rule stored
    with pytest.raises(BadRequestException):
        api.fraud_rule("review_ip", FraudRuleRequest.from_dict({"config": {"ips": ["nope"]}}))
    assert rules_of(api)["review_ip"] == {"ips": ["203.0.113.7"]}


def test_read_only_key_cannot_change_rules(org, engine):
    from largesse import auth, db

    with db.write(engine) as conn:
        _, key = auth.issue_key(conn, organization_id=org.id, permission="read_only")
    from tremendous import ApiClient, Configuration, TremendousApi

    reader = TremendousApi(ApiClient(Configuration(host=f"{org.base_url}/api/v2", access_token=key)))
    assert reader.list_fraud_rules().fraud_rules == []
    with pytest.raises(ForbiddenException):
        reader.fraud_rule("review_multiple_emails")


@pytest.mark.parametrize(("rule_type", "config", "key"), [
    ("review_country", {"type": "whitelist", "countries": []}, "countries"),
    ("review_country", {"type": "blacklist", "countries": []}, "countries"),
    ("review_ip", {"ips": []}, "ips"),
    ("allow_ip", {"ips": []}, "ips"),
    ("allow_email", {"emails": []}, "emails"),
])
def test_a_rule_with_an_empty_list_is_refused(http, rule_type, config, key):
    """An empty list holds nobody, or for a country whitelist every redemption: 400 at the list,
    on create and when update_list would empty it (API.md §2.10: the lists are required)."""
    assert error(http.post(f"/fraud_rules/{rule_type}", json={"config": config}), 400)["payload"] == {
        "config": {key: ["must have at least one entry (delete the rule instead)"]}}
    assert rule_type not in {r["rule_type"] for r in ok(http.get("/fraud_rules"))["fraud_rules"]}
    entry = {"countries": "US", "ips": "203.0.113.7", "emails": "a@example.com"}[key]
    ok(http.post(f"/fraud_rules/{rule_type}", json={"config": {**config, key: [entry]}}))
    why = f"would leave the rule without entries (its {key} must have at least one entry); delete the rule instead"
    assert error(http.post(f"/fraud_rules/{rule_type}/update_list", json={
        "operation": "remove", "config": {key: [entry]}}), 400)["payload"] == {"config": {key: [why]}}
    stored = next(r for r in ok(http.get("/fraud_rules"))["fraud_rules"] if r["rule_type"] == rule_type)
    assert stored["config"][key] == [entry]
