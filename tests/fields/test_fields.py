"""/fields: create (label from display_name), list, duplicates and validation (422)."""

from __future__ import annotations

import re

import pytest

from tests.factories import error, make_field, ok, unique


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


def test_duplicate_label_is_422(api, http):
    from tremendous.exceptions import UnprocessableEntityException

    field = make_field(http)
    errors = error(http.post("/fields", json={"display_name": field["label"], "data_type": "Text"}), 422)
    assert "display_name" in errors["payload"]
    with pytest.raises(UnprocessableEntityException) as caught:
        _create(api, {"display_name": field["label"], "data_type": "Text", "required": False})
    assert caught.value.data.errors.message
    assert [f["id"] for f in ok(http.get("/fields"))["fields"]] == [field["id"]]


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
])
def test_invalid_field_is_422(http, body):
    error(http.post("/fields", json=body), 422)
    assert ok(http.get("/fields"))["fields"] == []
