"""Reports: ask for a rewards report with filters, follow its status, download it when ready.

The form becomes POST /reports's body and reports/service.py's create() validates and queues
it (the same filters, errors and limit of reports in progress); the worker generates the
CSV. The download link is the one GET /reports/{id} hands out (the signed
/reports/download/<token>, built by the API's own link builder)."""

from __future__ import annotations

import re

from fastapi import APIRouter

from largesse import db
from largesse.campaigns import service as campaigns_service
from largesse.dashboard import access, forms
from largesse.dashboard.web import money, route
from largesse.errors import ApiError
from largesse.reports import endpoints as report_endpoints
from largesse.reports import service as reports
from largesse.reports.models import reports as reports_table

router = APIRouter()
F = "filters.digital_rewards."
# The API's error paths, in the words of the form's labels.
LABELS = {F + "amount.gte": "Smallest amount", F + "amount.lte": "Largest amount",
          F + "created_at.gte": "Created from", F + "created_at.lte": "Created to",
          F + "campaign_id": "Campaign", F + "order_id": "Order ID", F + "order_status": "Order status",
          F + "delivery_method": "Delivery method", F + "status": "Reward status"}
ORDER_STATUSES = {"executed": "Executed", "pending_approval": "Pending approval", "canceled": "Canceled",
                  "failed": "Failed"}
REWARD_STATUSES = {"delivered": "Delivered", "delivery_failed": "Delivery failed", "canceled": "Canceled",
                   "pending_review": "Held for fraud review"}
DELIVERY_METHODS = {"email": "Email", "link": "Link", "phone": "Phone"}
STATUS_TEXT = {reports.CREATED: "Waiting to be generated", reports.PROCESSING: "Being generated",
               reports.READY: "Ready to download", reports.FAILED: "Failed"}
EMPTY = {"amount_gte": "", "amount_lte": "", "from": "", "to": "", "campaign": "", "order": "", "order_status": "",
         "delivery_method": "", "status": []}


def describe(filters: dict, currency: str) -> str:
    """The stored filters (reports/service.validate) in words, for the list; amounts as the
    dashboard shows every amount, in the organization's currency."""
    words = {"amount_gte_cents": "amount from", "amount_lte_cents": "amount up to", "created_gte": "created from",
             "created_lte": "created to", "delivered_at": "delivered on", "campaign_id": "campaign",
             "order_id": "order", "delivery_method": "delivery", "order_status": "order status",
             "status": "reward status"}
    parts = []
    for key, value in filters.items():
        if key.endswith("_cents"):
            value = money(value, currency)
        elif isinstance(value, list):
            value = " or ".join(REWARD_STATUSES.get(v, v).lower() for v in value)
        else:
            value = ORDER_STATUSES.get(value, value) if key == "order_status" else value
        parts.append(f"{words.get(key, key)} {value}")
    return "; ".join(parts) or "All rewards"


def _link(ctx):
    # The API's link builder under the same process-independent key: the link GET /reports/{id} shows.
    return report_endpoints._linker(ctx.request, ctx.csrf_key)


def _body(entered: dict) -> dict:
    """The form as POST /reports's body (API.md §2.9); the amounts are read by the dashboard's
    one amount rule (forms.read_amount: "1,000.50", never "7,5" as 75), which raises AmountError
    naming the box. Whether an amount is acceptable stays the service's rule."""
    given: dict = {}
    amount = {}
    for key in ("gte", "lte"):
        if entered[f"amount_{key}"]:
            try:
                amount[key] = forms.read_amount(entered[f"amount_{key}"])
            except forms.AmountError as exc:  # named by the box's label, as the API's errors are
                raise forms.AmountError(f"{LABELS[F + 'amount.' + key]}: {exc}") from None
    created = {k: entered[f] for k, f in (("gte", "from"), ("lte", "to")) if entered[f]}
    if amount:
        given["amount"] = amount
    if created:
        given["created_at"] = created
    for key, field in (("campaign_id", "campaign"), ("order_id", "order"), ("order_status", "order_status"),
                       ("delivery_method", "delivery_method")):
        if entered[field]:
            given[key] = entered[field]
    if entered["status"]:
        given["status"] = entered["status"]
    return {"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": given}}


def _message(exc: ApiError) -> str:
    text = re.sub(r"^(" + re.escape(F + "status") + r")\.\d+:", r"\1:", exc.message)  # one of the statuses
    for path, label in LABELS.items():
        if text.startswith(path):
            text = label + text[len(path):]
        text = text.replace(path, label.lower())  # "... must be at least <the other box>"
    return text


def _page(ctx, status: int = 200, *, error: str | None = None, entered: dict | None = None):
    org = ctx.viewer.organization_id
    with db.read(ctx.engine) as conn:
        rows = [{**r, "described": describe(r["filters"], ctx.viewer.currency_code)}
                for r in reports.list_recent(conn, org, _link(ctx), limit=20)]
        campaigns = campaigns_service.list_for(conn, org)
    asked = ctx.arg("asked", max_length=20)
    notice = (f"Report {asked} requested: it is generated in the background. Refresh this page to see when "
              "it is ready.") if asked and any(r["id"] == asked for r in rows) else None
    return ctx.render("reports.html", status, title="Reports", rows=rows, campaigns=campaigns, error=error,
                      notice=notice, entered=entered or EMPTY, order_statuses=ORDER_STATUSES,
                      reward_statuses=REWARD_STATUSES, delivery_methods=DELIVERY_METHODS, status_text=STATUS_TEXT,
                      in_progress=reports.IN_PROGRESS)


@route(router, "GET", "/reports")
def list_reports(ctx):
    return _page(ctx)


@route(router, "POST", "/reports")
def create_report(ctx):
    form = ctx.form
    entered = {name: form.get(name, max_length=30) for name in EMPTY if name != "status"}
    # Every value goes to the service, which refuses an unknown one (as POST /reports does):
    # dropping it here asked for a report of all rewards instead.
    entered["status"] = form.getlist("status", max_length=30)
    try:
        body = _body(entered)
        with db.write(ctx.engine) as conn:
            report = reports.create(conn, ctx.viewer.organization_id, None, body)
    except forms.AmountError as exc:
        return _page(ctx, 400, error=str(exc), entered=entered)
    except ApiError as exc:  # 400 a filter or another organization's campaign or order, 429 too many in progress
        return _page(ctx, exc.status_code, error=_message(exc), entered=entered)
    return ctx.redirect(f"/dashboard/reports?asked={report['id']}")


@route(router, "GET", "/reports/{report_id}")
def show_report(ctx, report_id: str):
    with db.read(ctx.engine) as conn:
        row = access.owned(conn, ctx.viewer, reports_table, report_id)
        report = reports.get(conn, ctx.viewer.organization_id, row.id, _link(ctx))
    described = describe(row.filters, ctx.viewer.currency_code)
    return ctx.render("report.html", title=f"Report {row.id}", report={**report, "described": described},
                      status_text=STATUS_TEXT, in_progress=reports.IN_PROGRESS)
