"""An invoice as CSV and as PDF (made with fpdf2's core fonts: no font files to ship)."""

from __future__ import annotations

import csv
import io

from largesse.money import amount_in
from largesse.spreadsheet import safe_cell
from largesse.timeutil import iso

CSV_COLUMNS = ["invoice_id", "organization", "organization_id", "po_number", "memo", "amount", "currency_code",
               "status", "created_at", "paid_at"]


def _amount(row, *, grouped: bool = False) -> str:
    """The amount in the currency's decimals: "1000.00" for the CSV's data, "1,000.00" on the PDF."""
    return amount_in(row.amount_cents, row.currency_code, grouped=grouped)


def to_csv(row) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerow([safe_cell(v) for v in (
        row.id, row.organization_name, row.organization_id, row.po_number or "", row.memo or "", _amount(row),
        row.currency_code, row.status, iso(row.created_at), iso(row.paid_at) or "")])
    return out.getvalue()


def _latin1(text: str) -> str:
    # The core PDF fonts cover Latin-1; other characters are shown as '?'.
    return text.encode("latin-1", "replace").decode("latin-1")


def to_pdf(row) -> bytes:
    from fpdf import FPDF  # imported on first use: it takes ~0.7 s, which every start would pay

    pdf = FPDF(format="A4")
    pdf.set_creator("Largesse")
    pdf.set_title(_latin1(f"Invoice {row.id}"))
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 20)
    pdf.cell(0, 12, _latin1(f"Invoice {row.id}"), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 11)
    pdf.cell(0, 8, f"Status: {row.status}", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    lines = [
        ("Organization", f"{row.organization_name} ({row.organization_id})"),
        ("Amount", f"{_amount(row, grouped=True)} {row.currency_code}"),
        ("Currency", row.currency_code),
        ("PO number", row.po_number or "-"),
        ("Memo", row.memo or "-"),
        ("Created", row.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")),
        ("Paid", row.paid_at.strftime("%Y-%m-%d %H:%M:%S UTC") if row.paid_at else "not paid"),
    ]
    for label, value in lines:
        pdf.set_font("Helvetica", "B", 11)
        pdf.cell(40, 8, label)
        pdf.set_font("Helvetica", "", 11)
        pdf.multi_cell(0, 8, _latin1(str(value)), new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())
