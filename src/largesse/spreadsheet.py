"""Cells of the CSV files Largesse writes (reports, invoices, the dashboard's link lists), made
inert for spreadsheets: the one rule for every such file."""

from __future__ import annotations

# A cell starting with one of these is a formula to a spreadsheet (or starts one after a tab
# or carriage return): CSV injection.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value) -> str:
    """The cell as text a spreadsheet will not run: given a leading apostrophe when it starts
    like a formula; None is an empty cell. The files are comma-separated, and the CSV writer
    quotes a cell with a comma, but a spreadsheet whose locale separates lists with semicolons
    (de-DE, fr-FR) splits an unquoted cell at each one: every part after a semicolon that starts
    like a formula gets its apostrophe too ("ext;=1+2" is written "ext;'=1+2")."""
    if value is None:
        return ""
    value = str(value)
    if ";" in value:
        return ";".join(_inert(part) for part in value.split(";"))
    return _inert(value)


def _inert(part: str) -> str:
    return "'" + part if part.startswith(FORMULA_START) else part
