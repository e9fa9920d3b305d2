"""/fields: create (label from display_name), list, duplicates and validation (422)."""

from __future__ import annotations

import re

import pytest

from tests.factories import error, make_field, ok, place, unique


def _create(api, body: dict):
    from tremendous import CreateFieldRequest

    return api.create_field(CreateFieldRequest.from_dict(body)).var_field


def test_client_create_and_list(api):
    name = unique("Cost  Center ")
    field = _create(api, {"display_name": name, "data_type": "Dropdown", "data": {"options": ["A1", "B2"]},
                          "required": True})
    assert field.label == " ".join(name.split())
    assert re.match(r"^[A-Z0-9]{12,20}$", field.id)
    assert (field.data_type, field.required, field.scope) == ("Dropdown", True, "REWARD")
    assert field.data.options == ["A1", "B2"]
    listed = {f.id: f for f in api.list_fields().fields}
    assert listed[field.id].label == field.label and listed[field.id].data.options == ["A1", "B2"]


def test_text_field_has_no_options(http):
    field = make_field(http, data_type="Text", options=None)
    assert field["data"] == {} and field["data_type"] == "Text" and field["required"] is False


def test_options_carry_their_display_labels(api, http):
    """API.md §3 Field: data.labels maps an option to the text shown for it (it was dropped)."""
    body = {"display_name": "Tier", "data_type": "Dropdown",
            "data": {"options": ["gold", "silver"], "labels": {"gold": "Gold tier"}}}
    field = ok(http.post("/fields", json=body))["field"]
    assert field["data"] == {"options": ["gold", "silver"], "labels": {"gold": "Gold tier"}}
    assert [f.data.labels for f in api.list_fields().fields] == [{"gold": "Gold tier"}]
    for data_type, data, key in (("Dropdown", {"options": ["a"], "labels": {"b": "Bee"}}, "labels"),
                                 ("Text", {"labels": {"a": "A"}}, "labels")):
        refused = error(http.post("/fields", json={"display_name": f"Other {data_type}", "data_type": data_type,
                                                   "data": data}), 422)
        assert key in refused["payload"]["data"], refused
    assert [f["label"] for f in ok(http.get("/fields"))["fields"]] == ["Tier"]


def test_duplicate_label_is_422(api, http):
    from tremendous.exceptions import UnprocessableEntityException

    field = make_field(http)
    errors = error(http.post("/fields", json={"display_name": field["label"], "data_type": "Text"}), 422)
    assert "display_name" in errors["payload"]
    with pytest.raises(UnprocessableEntityException) as caught:
        _create(api, {"display_name": field["label"], "data_type": "Text", "required": False})
    assert caught.value.data.errors.message
    assert [f["id"] for f in ok(http.get("/fields"))["fields"]] == [field["id"]]


# What would break GET /rewards?<label>=<value>, or is not a letter or digit of any script.
PUNCTUATED = ["Größe-Klasse", "Dépt.", "a/b", "a=b", "a&b", "a[b]", "a]", "a%b", "a+b", "Prix €", "\u0301ab",
              "ab \u0301", "a\u200bb"]


@pytest.mark.parametrize(("display_name", "label"), [
    ("Größe", "Größe"),
    ("Département", "Département"),
    ("De\u0301partement", "Département"),  # decomposed é: the same label, NFC
    ("Código  postal", "Código postal"),
    ("東京_2", "東京_2"),
    ("हिन्दी नाम", "हिन्दी नाम"),  # vowel signs and virama are marks of the letters
    ("Ελλάδα ٣", "Ελλάδα ٣"),
])
def test_letters_and_digits_of_any_script_make_a_label(api, http, display_name, label):
    # API.md §2.3: letters, digits, spaces, underscores; ö and é are letters.
    field = ok(http.post("/fields", json={"display_name": display_name, "data_type": "Text"}))["field"]
    assert field["label"] == label
    assert [f.label for f in api.list_fields().fields] == [label]
    error(http.post("/fields", json={"display_name": label, "data_type": "Text"}), 422)


def test_search_rewards_by_a_non_ascii_label(org, http):
    size = make_field(http, name="Größe", options=["M", "XL"])
    dept = make_field(http, data_type="Text", options=None, name="Département")
    medium = place(http, org.member_email, custom_fields=[{"id": size["id"], "value": "M"},
                                                          {"id": dept["id"], "value": "Lyon"}])["rewards"][0]["id"]
    place(http, org.member_email, custom_fields=[{"id": size["id"], "value": "XL"},
                                                 {"id": dept["id"], "value": "Lyon"}])

    def found(query) -> list[str]:
        return [r["id"] for r in ok(http.get("/rewards", params=query))["rewards"]]

    assert found({"Größe": "M"}) == [medium]  # httpx percent-encodes the name as UTF-8
    assert [r["id"] for r in ok(http.get("/rewards?Gr%C3%B6%C3%9Fe=M"))["rewards"]] == [medium]
    assert len(found({"Département": "Lyon"})) == 2
    assert len(found({"De\u0301partement": "Lyon"})) == 2  # decomposed é: the same label (NFC)
    assert found({"Département": "Lyon", "Größe": "M"}) == [medium]
    assert found({"Größe": "S"}) == [] and found({"Grösse": "M"}) == []
    # A repeated label is one filter, its last value (as every repeated query parameter is).
    assert found([("Größe", "XL"), ("Größe", "M")]) == [medium]
    assert len(found([("Département", "Paris"), ("De\u0301partement", "Lyon")])) == 2
    reward = ok(http.get(f"/rewards/{medium}"))["reward"]
    assert {f["label"]: f["value"] for f in reward["custom_fields"]} == {"Größe": "M", "Département": "Lyon"}


def test_a_labels_length_is_counted_in_nfc(org, http):
    """The 100-character bound is the label's (NFC, spaces folded), not the text as sent: 60
    decomposed é are 120 code points and a 60-letter label, on POST /fields and on a search."""
    composed, decomposed = "é" * 60, "e\u0301" * 60
    field = make_field(http, data_type="Text", options=None, name=decomposed)
    assert field["label"] == composed
    place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "v"}])
    for label in (composed, decomposed, "  " + decomposed.replace("e", " e", 1)):
        assert ok(http.get("/rewards", params={label: "v"}))["total_count"] == 1, label
    assert error(http.get("/rewards", params={"e" * 101: "v"}), 400)["message"] == "label is too long"
    assert "display_name" in error(http.post("/fields", json={
        "display_name": "e" * 101, "data_type": "Text"}), 422)["payload"]


@pytest.mark.parametrize("body", [
    {"display_name": "bad-name!", "data_type": "Text"},
    {"display_name": "", "data_type": "Text"},
    {"display_name": "Fine", "data_type": "Spreadsheet"},
    {"display_name": "Fine", "data_type": "Dropdown"},
    {"display_name": "Fine", "data_type": "Dropdown", "data": {"options": []}},
    {"display_name": "Fine", "data_type": "Dropdown", "data": {"options": ["a", "a"]}},
    {"display_name": "Fine", "data_type": "Dropdown", "data": {"options": "a,b"}},
    {"display_name": "limit", "data_type": "Text"},
    {"display_name": "Offset", "data_type": "Text"},
    {"display_name": "Fine", "data_type": "Text", "required": "yes"},
    {"data_type": "Text"},
    {"display_name": "\u0958" * 100, "data_type": "Text"},  # 100 characters, 200 once in NFC
    *({"display_name": name, "data_type": "Text"} for name in PUNCTUATED),
])
def test_invalid_field_is_422(http, body):
    error(http.post("/fields", json=body), 422)
    assert ok(http.get("/fields"))["fields"] == []


@pytest.mark.parametrize(("data_type", "good", "bad"), [
    ("Number", ["12", "-3.50"], ["12\n", "\u0661\u0662", "\uff11\uff12", "1e3", " 12 ", "NaN"]),
    ("Currency", ["0.99"], ["5\n"]),
    ("Email", ["a@b.co"], ["a@b.co\n", "a b@c.co"]),
    ("Date", ["2026-01-05"], ["20260105", "2026-W02-1", "2026-1-5", "2026-01-05\n", "\u0662\u0660\u0662\u0666-01-05"]),
])
def test_a_value_is_checked_by_its_fields_type_exactly(org, http, data_type, good, bad):
    """ASCII digits only, no final newline (a regex's $ matches before one), a date only as
    YYYY-MM-DD: what is stored is what a search for it finds."""
    field = ok(http.post("/fields", json={"display_name": f"{data_type} {unique()}", "data_type": data_type}))["field"]
    before = ok(http.get("/orders"))["total_count"]
    for value in bad:
        body = error(http.post("/orders", json={
            "payment": {"funding_source_id": "BALANCE"},
            "reward": {"value": {"denomination": 5}, "products": ["PCSBANKACH01US"], "delivery": {"method": "EMAIL"},
                       "recipient": {"name": "R", "email": org.member_email},
                       "custom_fields": [{"id": field["id"], "value": value}]}}), 400)
        assert list(body["payload"]["reward"]["custom_fields"]["0"]) == ["value"], (value, body)
    assert ok(http.get("/orders"))["total_count"] == before
    for value in good:
        reward = place(http, org.member_email, custom_fields=[{"id": field["id"], "value": value}])["rewards"][0]
        found = ok(http.get("/rewards", params={field["label"]: value}))["rewards"]
        assert [r["id"] for r in found] == [reward["id"]], value


def test_a_checkbox_value_in_any_capitals_is_stored_and_found_as_true_or_false(org, http, engine):
    """The field took True and TRUE and stored them as sent: a search for true missed them (a
    Python client sending str(True) writes "True"). Stored lower-case, found in any capitals."""
    from sqlalchemy import text

    from largesse import db
    from largesse.migrate import upgrade

    field = ok(http.post("/fields", json={"display_name": f"Opted in {unique()}", "data_type": "Checkbox"}))["field"]
    ids = {value: place(http, org.member_email, custom_fields=[{"id": field["id"], "value": value}])["rewards"][0]["id"]
           for value in ("true", "True", "TRUE", "False")}
    created = ok(http.get(f"/rewards/{ids['TRUE']}"))["reward"]["custom_fields"]
    assert [(f["label"], f["value"]) for f in created] == [(field["label"], "true")]

    def found(value) -> set[str]:
        return {r["id"] for r in ok(http.get("/rewards", params={field["label"]: value}))["rewards"]}

    trues = {ids["true"], ids["True"], ids["TRUE"]}
    assert found("true") == found("True") == found("TRUE") == trues
    assert found("false") == found("FALSE") == {ids["False"]}
    # Values stored as sent before: migration 0025 brings them to lower case.
    with db.write(engine) as conn:
        conn.execute(text("UPDATE reward_field_values SET value = 'TRUE' WHERE reward_id = :id"), {"id": ids["TRUE"]})
        conn.execute(text("UPDATE alembic_version SET version_num = '0024'"))
    upgrade(engine)
    assert ok(http.get(f"/rewards/{ids['TRUE']}"))["reward"]["custom_fields"][0]["value"] == "true"
    assert found("true") == trues
