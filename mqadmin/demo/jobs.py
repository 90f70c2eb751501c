"""Handlers for every job ``manage.py seed_demo`` enqueues (the development project only).

Short, realistic work: each run sleeps a few hundred milliseconds at most, reports
progress and writes log lines, and now and then fails the way the real thing would
(a declined card fails at once, an SMTP timeout is retried with the job's backoff,
a report with a bug fails on every attempt).  The demo flow settles: the monthly
report fans out into region reports (one of which fans out into country reports) and
collects their results once they all reported.

Jobs of the seeded store live in the first configured store; the flow's region and
country reports in the second one when there is one (as ``seed_demo`` puts them).
"""

from __future__ import annotations

import logging
import random
from typing import Any

from mqadmin import services
from mqadmin.management.commands.seed_demo import (
    COUNTRIES,
    FLOW_NAME,
    KINDS,
    CardDeclinedError,
    SmtpTimeoutError,
    UpstreamUnavailableError,
)
from store.flow_runtime import Flow, FlowResults, children
from store.jobs import Job, Unrecoverable, current_job

logger = logging.getLogger(__name__)

_stores = list(services.configured_stores())
#: The store seed_demo fills by default (its first configured store).
STORE = _stores[0]
#: Where seed_demo puts the flow's children: the second store, else the same one.
CHILDREN_STORE = _stores[1] if len(_stores) > 1 else STORE

#: The longest a demo handler works (ms): the demo moves within seconds.
MAX_WORK_MS = 300
_RATES = {kind["name"]: kind for kind in KINDS}
#: Regions whose report is itself a flow over country reports (seed_demo nests "eu").
COUNTRY_BREAKDOWN = {"eu": list(COUNTRIES), "dach": ["de", "at", "ch"]}


class PaymentGatewayTimeoutError(TimeoutError):
    """The payment provider did not answer in time (worth retrying)."""


class MailboxUnavailableError(Unrecoverable):
    """The mail relay refused the recipient for good (no retry helps)."""


class CardRefusedError(CardDeclinedError, Unrecoverable):
    """A declined card: retrying the same card cannot succeed."""


class ReportQueryTimeoutError(TimeoutError):
    """The reporting database cancelled a slow query."""


def _work(low: int, high: int, steps: int = 1, what: str = "") -> None:
    """Sleep a few hundred ms in ``steps`` (interruptible), reporting progress as it goes."""
    ctx = current_job()
    total = random.randint(low, min(high, MAX_WORK_MS))
    for step in range(1, steps + 1):
        ctx.sleep(total / steps)
        if steps > 1:
            ctx.progress(round(step * 100 / steps))
            if what:
                ctx.log(f"{what}: step {step} of {steps}")


def _roll(name: str) -> tuple[bool, bool]:
    """(doomed, unlucky): a doomed job fails on every attempt, an unlucky run fails once."""
    kind = _RATES.get(name, {})
    doomed = random.Random(current_job().job_id).random() < kind.get("doomed", 0.0)
    return doomed, random.random() < kind.get("fail", 0.0)


# ---------------------------------------------------------------------- store jobs


def send_welcome_email(payload: dict[str, Any]) -> dict[str, Any]:
    ctx = current_job()
    to = payload.get("to", "someone@example.com")
    ctx.log(f"rendering template {payload.get('template', 'welcome')!r} for {to}")
    _work(40, 250)
    doomed, unlucky = _roll("SendWelcomeEmail")
    if doomed:
        raise MailboxUnavailableError(f"550 5.1.1 <{to}>: mailbox unavailable")
    if unlucky:
        raise SmtpTimeoutError(f"smtp.example.com:587 did not answer within 10 s (to {to})")
    ctx.log("accepted by smtp.example.com")
    return {"message_id": f"<{random.getrandbits(40):010x}@mail.example.com>"}


def charge_card(payload: dict[str, Any]) -> dict[str, Any]:
    ctx = current_job()
    card = payload.get("card", {})
    ctx.log(
        f"charging {payload.get('amount_cents', 0) / 100:.2f} {payload.get('currency', 'EUR')} "
        f"for {payload.get('invoice_id')}"
    )
    _work(80, 300)
    doomed, unlucky = _roll("ChargeCard")
    if doomed:
        reason = random.Random(ctx.job_id).choice(
            ["insufficient_funds", "expired_card", "do_not_honor", "stolen_card"]
        )
        raise CardRefusedError(
            f"card {card.get('brand')} ending {card.get('last4')} was declined: {reason}"
        )
    if unlucky:
        raise PaymentGatewayTimeoutError(
            "POST https://api.payments.example.com/v1/charges timed out after 8.0 s"
        )
    return {"charge_id": f"ch_{random.getrandbits(48):012x}", "status": "succeeded"}


def build_report(payload: dict[str, Any]) -> dict[str, Any]:
    report = payload.get("report", "sales")
    _work(150, 300, steps=4, what=f"{report} report {payload.get('period')}")
    doomed, unlucky = _roll("BuildReport")
    if doomed:
        row = {"region": "eu", "period": payload.get("period")}
        # The column the template expects is missing: a real bug, failing every attempt.
        return {"revenue": row["revenue"]}
    if unlucky:
        raise ReportQueryTimeoutError(
            "canceling statement due to statement timeout (reporting replica, 30 s)"
        )
    return {
        "url": f"https://reports.example.com/{random.getrandbits(32):08x}.{payload.get('format', 'pdf')}",
        "rows": random.randint(100, 90_000),
    }


def sync_inventory(payload: dict[str, Any]) -> dict[str, Any]:
    ctx = current_job()
    warehouse = payload.get("warehouse", "BER-1")
    skus = list(payload.get("skus") or [])
    ctx.log(f"fetching stock of {len(skus)} SKU(s) from {warehouse}")
    _work(60, 250)
    doomed, unlucky = _roll("SyncInventory")
    if doomed:
        raise UpstreamUnavailableError(f"inventory API answered 503 for warehouse {warehouse}")
    if unlucky:
        raise ConnectionResetError(f"connection reset by inventory-{warehouse.lower()}.internal")
    return {"updated": random.randint(0, len(skus) or 1), "skipped": random.randint(0, 2)}


def cleanup_temp_files(payload: dict[str, Any]) -> dict[str, Any]:
    _work(20, 150)
    deleted = random.randint(0, 240)
    current_job().log(f"deleted {deleted} file(s) under {payload.get('path', '/var/tmp')}")
    return {"deleted": deleted, "freed_mb": round(deleted * random.uniform(0.1, 4.0), 1)}


def reindex_search(payload: dict[str, Any]) -> dict[str, Any]:
    _work(150, 300, steps=5, what=f"reindexing {payload.get('index', 'products')}")
    return {"index": payload.get("index", "products"), "documents": random.randint(1_000, 50_000)}


def send_digest(payload: dict[str, Any]) -> dict[str, Any]:
    _work(50, 250)
    if random.random() < 0.1:
        raise SmtpTimeoutError("smtp.example.com:587 did not answer within 10 s (digest batch)")
    return {"digest": payload.get("digest", "weekly"), "sent": random.randint(1, 500)}


def refresh_price_cache(payload: dict[str, Any]) -> dict[str, Any]:
    _work(30, 200)
    return {"updated": random.randint(0, 40), "skipped": 0}


def _job(name: str, fn: Any, queue: str, store: str, **options: Any) -> Job:
    return Job(name, handler=fn, queue=queue, store=store, **options)


SendWelcomeEmail = _job("SendWelcomeEmail", send_welcome_email, "emails", STORE, attempts=4)
ChargeCard = _job("ChargeCard", charge_card, "billing", STORE, attempts=3)
BuildReport = _job("BuildReport", build_report, "reports", STORE)
SyncInventory = _job("SyncInventory", sync_inventory, "default", STORE, attempts=2)
CleanupTempFiles = _job("CleanupTempFiles", cleanup_temp_files, "default", STORE)
ReindexSearch = _job("ReindexSearch", reindex_search, "maintenance", STORE, attempts=2)
SendDigest = _job("SendDigest", send_digest, "emails", STORE, attempts=3)
RefreshPriceCache = _job("RefreshPriceCache", refresh_price_cache, "maintenance", STORE)

# ---------------------------------------------------------------------- the flow

RenderCountryReport = Job("RenderCountryReport", queue="reports", store=CHILDREN_STORE, attempts=2)


@RenderCountryReport.handler
def render_country_report(payload: dict[str, Any]) -> dict[str, Any]:
    _work(50, 200, steps=2, what=f"country report {payload.get('country')}")
    return {"pages": random.randint(2, 5), "country": payload.get("country")}


RenderRegionReport = Job("RenderRegionReport", queue="reports", store=CHILDREN_STORE, attempts=2)
#: A region's report: a flow over its countries for the regions broken down by country,
#: an empty fan-out (collected at once) for the others.
region_flow = Flow("RegionReport", parent=RenderRegionReport, children=[RenderCountryReport])


@region_flow.fan_out
def region_fan_out(payload: dict[str, Any]) -> Any:
    region = payload.get("region", "")
    _work(30, 150)
    countries = COUNTRY_BREAKDOWN.get(region, [])
    if not countries:
        return []
    current_job().log(f"{region}: one report per country ({', '.join(countries)})")
    return children(
        RenderCountryReport,
        [(country, {"country": country, "period": payload.get("period")}) for country in countries],
    )


@region_flow.collect
def region_collect(payload: dict[str, Any], results: FlowResults) -> dict[str, Any]:
    region = payload.get("region", "")
    _work(50, 200, steps=3, what=f"region report {region}")
    if random.Random(current_job().job_id).random() < 0.05:
        raise ReportQueryTimeoutError(
            f"canceling statement due to statement timeout (region {region})"
        )
    pages = 14 + sum(r.value.get("pages", 0) for r in results.all()["completed"] if r.value)
    return {"pages": pages, "url": f"https://reports.example.com/{region}.pdf"}


BuildMonthlyReport = Job("BuildMonthlyReport", queue="reports", store=STORE, attempts=2)
monthly_flow = Flow(FLOW_NAME, parent=BuildMonthlyReport, children=[RenderRegionReport])


@monthly_flow.fan_out
def monthly_fan_out(payload: dict[str, Any]) -> Any:
    regions = list(payload.get("regions") or [])
    current_job().log(f"fanning out {len(regions)} region reports")
    return children(
        RenderRegionReport,
        [(region, {"region": region, "period": payload.get("period")}) for region in regions],
    )


@monthly_flow.collect
def monthly_collect(payload: dict[str, Any], results: FlowResults) -> dict[str, Any]:
    counts = results.counts
    _work(100, 300, steps=3, what="assembling the monthly report")
    logger.info(
        "monthly report %s: %d region(s) completed, %d failed",
        payload.get("period"),
        counts.completed,
        counts.failed,
    )
    return {
        "period": payload.get("period"),
        "regions_completed": counts.completed,
        "regions_failed": counts.failed,
        "url": f"https://reports.example.com/monthly-{payload.get('period')}.pdf",
    }
