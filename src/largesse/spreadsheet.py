"""Cells of the CSV files Largesse writes (reports, invoices, the dashboard's link lists), made
inert for spreadsheets: the one rule for every such file."""

from __future__ import annotations

# A cell starting with one of these is a formula to a spreadsheet (or starts one after a tab
# or carriage return): CSV injection.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value) -> str:
    """The cell as text a spreadsheet will not run: given a leading apostrophe when it starts
    like a formula; None is an empty cell."""
    if value is None:
        return ""
    value = str(value)
    return "'" + value if value.startswith(FORMULA_START) else value
