"""The simulation's world: the real services wired to a fresh database, SMTP server,
webhook receiver and virtual clock, plus a single-threaded worker whose process can die."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from sqlalchemy import func, select

from largesse import crypto, db, timeutil
from largesse.auth import Credentials, hash_key
from largesse.bootstrap import prepare
from largesse.catalog import service as catalog
from largesse.config import Settings
from largesse.delivery import jobs as job_queue
from largesse.delivery import tasks
from largesse.delivery.models import jobs
from largesse.delivery.transport import SmtpTransport
from largesse.delivery.worker import BATCH
from largesse.funding.models import funding_sources
from largesse.orgs import service as orgs
from largesse.redemption import inventory
from largesse.webhooks import service as webhooks
from simulation.faults import Killed, KillingTransport, StatementFault
from simulation.model import Model, OrgM
from simulation.ops import INVENTORY_CENTS, INVENTORY_PRODUCT, harvest_mail
from simulation.parts import Clock, Database, SmtpServer, WebhookReceiver


class SimWorker:
    """What delivery/worker.py's Worker does (claim a batch of a lane, prepare it, run each job
    with the real run_claimed, complete the batch; the heartbeat's reclaim of expired leases), minus
    the threads, so that the seeded simulation decides which lane runs when. No virtual time
    passes while a job runs, so leases never need renewing. start() is a (re)started process."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.generation = 0
        self.transport: KillingTransport | None = None
        self.start()

    def start(self) -> None:
        self.generation += 1
        self.id = f"sim-worker-{self.generation}"
        settings = self.sim.settings
        self.transport = KillingTransport(SmtpTransport(settings.smtp_url, timeout=settings.smtp_timeout_seconds))
        self.ctx = tasks.Context(self.sim.engine, settings, self.id, self.transport)
        self.cursors = {lane: job_queue.Cursor() for lane in BATCH}

    def housekeeping(self) -> int:
        """The heartbeat's chores: the expiry sweep's row exists; expired leases are requeued."""
        job_queue.ensure_periodic(self.sim.engine, "expire_rewards")
        return job_queue.reclaim_expired(self.sim.engine)

    def batch(self, lane: str) -> tuple[int, str | None]:
        """Claim and run one batch of `lane`; (jobs claimed, how the process died in it, if it did)."""
        rows, items = [], []
        try:
            rows = job_queue.claim(self.sim.engine, self.id, limit=BATCH[lane],
                                   lease_seconds=self.sim.settings.job_lease_seconds, lane=lane,
                                   cursor=self.cursors[lane], environment=self.sim.settings.environment)
            try:
                items = tasks.prepare_batch(self.ctx, rows) if rows else []
                for item in items:
                    tasks.run_claimed(self.ctx, item)
                tasks.complete_sent(self.ctx)
            except BaseException:
                # Killed: the process is gone. Anything else: the real worker's loop logs it and
                # goes on with a new batch. Either way nothing of this batch was completed by the
                # batch's last transaction, so what it claimed waits for its lease (the emails
                # already sent go out again then: at-least-once).
                self.ctx.sent.clear()
                self._abandon(rows, items)
                raise
        except Killed as exc:
            self.transport.inner.close()  # the dead process's connection goes away with it
            self.start()
            return len(rows), "killed after send" if "SMTP" in str(exc) else "killed at a statement"
        return len(rows), None

    def drain(self) -> None:
        """Every lane until nothing is due (the end of a run)."""
        for lane in BATCH:
            while self.batch(lane)[0]:
                harvest_mail(self.sim)

    def chores(self) -> int:
        """housekeeping() in a process that may be killed in it (then restarted)."""
        try:
            return self.housekeeping()
        except Killed:
            self.transport.inner.close()
            self.start()
            return 0

    def _abandon(self, rows, items) -> None:
        skipped = {item.job.id for item in items if item.skipped}
        self.sim.model.abandoned_jobs.update(row.id for row in rows if row.id not in skipped)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Simulation:
    def __init__(self, seed: int, backend: str, *, log=print):
        self.seed = seed
        self.backend = backend
        self.rng = random.Random(seed)
        self.log = log
        self.clock = Clock()
        self.model = Model()
        self.step = 0
        self.counts: dict[str, int] = {}
        self.observations: list[str] = []  # behaviour worth a look that breaks no invariant
        self.fund_retry: list = []  # fundings with a reference that failed by a fault: the operator retries
        self.retry_later: list = []  # orders with an external_id that failed by a fault: clients retry them
        self.delivery_failed: list[str] = []  # ACTIVE rewards whose delivery FAILED (checks.py keeps it)
        self.hang_once = False  # the webhook receiver hangs during this step
        self.kill_next_send = False  # the next worker run dies right after an SMTP send
        self.expiry_days: dict[str, int | None] = {}  # reward expiry of each organization (days)
        self.database = Database(backend)
        self.smtp = SmtpServer()
        self.receiver = WebhookReceiver()
        self.settings = Settings(
            database_url=self.database.url, environment="sandbox", public_url="http://127.0.0.1:9",
            smtp_url=self.smtp.url, run_worker=False, smtp_timeout_seconds=5.0,
            webhook_timeout_seconds=1.0, webhook_allow_private=True,  # leases, retries, expiry: the defaults
            secret_key=f"simulation-{seed}",
            # Every job is kept: the final checks read each one (the clock can pass the retention).
            job_retention_days=0,
        )
        timeutil.set_clock(self.clock)
        self.engine = db.make_engine(self.database.url)
        prepare(self.engine)
        self.fault = StatementFault(self.engine)
        self.worker = SimWorker(self)
        self._quiet_logs()
        self._create_orgs()
        self._create_inventory_product()

    @staticmethod
    def _quiet_logs() -> None:
        # Injected faults make the services log tracebacks; they are expected here.
        for name in ("largesse", "largesse.delivery", "largesse.webhooks", "aiosmtpd", "mail.log"):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    def _create_orgs(self) -> None:
        box = crypto.keybox(self.settings)
        for n, name in enumerate(("Acme Sim", "Globex Sim")):
            member = f"owner{n}@sim{n}.example.com"
            with db.write(self.engine) as conn:
                created = orgs.create_org(conn, name=name, member_email=member, member_name="Owner", sandbox=True)
                webhooks.upsert(conn, created.organization_id, self.receiver.url, box)
            credentials = Credentials(hash_key(created.api_key), writes=True, environment="sandbox")
            self.model.orgs.append(OrgM(created.organization_id, credentials, created.funding_source_id, member,
                                        funded_cents=created.available_cents))

    def _create_inventory_product(self) -> None:
        """A gift card paid out from loaded codes (the `inventory` provider): it can run out."""
        with db.write(self.engine) as conn:
            catalog.import_rows(conn, catalog.parse_catalog({"products": [{
                "id": INVENTORY_PRODUCT, "name": "Simulated Inventory Card", "category": "merchant_card",
                # One fixed value: a code is a card of its product's one value (inventory.card_value).
                "countries": ["US"], "skus": [{"min": INVENTORY_CENTS // 100, "max": INVENTORY_CENTS // 100,
                                               "currency_code": "USD"}],
                "fulfillment": "inventory"}]}))
        self.restock(3)

    def restock(self, count: int) -> int:
        """`largesse inventory import` of `count` new codes (and one repeated code, skipped)."""
        first = self.model.codes_loaded
        codes = [f"SIM-{self.seed}-{n:06d}" for n in range(first, first + count)]
        text = "code,pin\n" + "".join(f"{c},{n % 10000:04d}\n" for n, c in enumerate(codes)) + (
            f"{codes[0]},0000\n" if codes else "")
        with db.write(self.engine) as conn:
            imported, _skipped, _ = inventory.import_codes(conn, INVENTORY_PRODUCT, text)
        self.model.codes_loaded += imported
        return imported

    # --- reading the database (for predictions; checks.py verifies what it reads) ------------

    def available(self, org: OrgM) -> int:
        with self.fault.pause(), db.read(self.engine) as conn:
            return conn.execute(select(funding_sources.c.available_cents)
                                .where(funding_sources.c.id == org.balance_id)).scalar_one()

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # --- the end of a run: no faults, time passes until every job is due, the worker drains --

    def settle(self, max_rounds: int = 400) -> int:
        """Heal every fault, then advance the clock past every lease, backoff and scheduled
        delivery and run the worker until nothing is left to do; returns the rounds it took."""
        self.fault.disarm()
        self.smtp.set_mode("accept")
        self.receiver.set_mode("ok")
        for rounds in range(1, max_rounds + 1):
            self.clock.advance(self.settings.job_lease_seconds + 1)
            self.worker.housekeeping()
            self.worker.drain()
            with db.read(self.engine) as conn:
                pending = conn.execute(
                    select(func.count(), func.min(jobs.c.run_after))
                    .where(jobs.c.status.in_((job_queue.QUEUED, job_queue.RUNNING)),
                           jobs.c.kind.not_in(job_queue.PERIODIC))).one()
            if not pending[0]:
                # One more sweep at the final time, so every overdue reward is expired.
                self.clock.advance(self.settings.expire_interval_seconds + 1)
                self.worker.drain()
                return rounds
            if pending[1] is not None and pending[1] > self.clock.now:
                self.clock.now = max(self.clock.now, pending[1]) + timedelta(seconds=1)
        return max_rounds

    def close(self) -> None:
        try:
            self.worker.close()
            self.engine.dispose()
        finally:
            timeutil.set_clock(None)
            self.receiver.close()
            self.smtp.close()
            self.database.close()
