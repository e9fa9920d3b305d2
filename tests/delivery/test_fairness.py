"""No organization and no kind of job starves the others.

- Webhook receivers that trickle their answers (orgs A and C, several events each) hold
  webhook threads only, and one each of the eight: org B's email, sent by a real `largesse
  worker` process with the default settings, goes out within 15 s, and org B's own webhook
  event within 5 s. (With two threads and a cap of N - 1, two slow organizations held both.)
- One organization's backlog of 600 emails does not delay another organization's email by
  more than a batch or two.
"""

from __future__ import annotations

import time

from largesse.delivery.jobs import MAIL
from largesse.delivery.worker import BATCH, Worker
from tests.conftest import create_org
from tests.delivery.conftest import tagged
from tests.delivery.procs import Smtp, StallHandler, delivery_statuses, env_for, start_worker, wait_until
from tests.delivery.test_recovery import order, settle
from tests.factories import ok
from tests.webhooks.kit import Receiver, Trickler


def test_trickling_webhook_receivers_do_not_delay_another_orgs_email(engine, server, database_url, fast, tmp_path):
    good = Smtp(StallHandler(stall=0))
    # Headers, then one byte every 3 s of a 1000-byte body: never finishes within any deadline.
    tricklers = [Trickler(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"x" * 1000, interval=3.0)
                 for _ in range(2)]
    receiver = Receiver()
    slow = [create_org(engine, server.url, name=f"Slow Hooks {n}") for n in (1, 2)]
    org_b = create_org(engine, server.url, name="Waiting")
    proc = None
    try:
        settle(engine, fast, good.url)
        for org, trickler in zip(slow, tricklers, strict=True):
            with org.http() as a:
                hook = ok(a.post("/webhooks", json={"url": trickler.url}))["webhook"]
                for _ in range(6):
                    assert a.post(f"/webhooks/{hook['id']}/simulate",
                                  json={"event": "ORDERS.CREATED"}).status_code == 200
        with org_b.http() as b:
            ok(b.post("/webhooks", json={"url": receiver.url}))
            proc = start_worker(env_for(database_url, good.url), tmp_path / "worker.log")  # the defaults: 2 + 8
            wait_until(lambda: all(t.requests >= 1 for t in tricklers), 20,
                       message="the slow receivers got no request")
            address = tagged(org_b.member_email, "waiting")
            started = time.monotonic()
            [reward_id] = order(b, [address])
            wait_until(lambda: delivery_statuses(engine, [reward_id])[reward_id] == "SUCCEEDED", 15, interval=0.1,
                       message="org B's email was not delivered")
            email_after = time.monotonic() - started
            # Each slow organization's POSTs use one of the eight webhook threads at a time.
            wait_until(lambda: receiver.events("ORDERS.CREATED"), 5, interval=0.1,
                       message="org B's webhook event was not delivered")
            hook_after = time.monotonic() - started
        held = [t.requests for t in tricklers]
        print(f"\nFAIRNESS: org B's email {email_after:.1f} s, its webhook {hook_after:.1f} s, "
              f"while two receivers trickled ({held} requests held)")
        assert len(good.handler.to(address)) == 1
        assert max(held) <= 2, held  # one POST per organization at a time (and its retry)
    finally:
        if proc is not None:
            proc.kill()
        for trickler in tricklers:
            trickler.close()
        receiver.server.shutdown()
        good.stop()


def test_a_large_backlog_of_one_org_does_not_delay_another_orgs_email(engine, server, fast):
    sink = Smtp(StallHandler(stall=0))
    big, small = create_org(engine, server.url, name="Big Sender"), create_org(engine, server.url, name="Small")
    try:
        settle(engine, fast, sink.url)
        with big.http() as a, small.http() as b:
            for batch in range(3):
                order(a, [tagged(big.member_email, f"b{batch}-{i}") for i in range(200)])
            late = tagged(small.member_email, "late")
            order(b, [late])
        # One email thread: the order of acceptance at the SMTP server is the order of claims.
        Worker(engine, fast(smtp_url=sink.url), concurrency=1, webhook_concurrency=0).drain()
        sent = sink.handler.order()
        position = sent.index(late) + 1
        print(f"\nFAIRNESS: behind a backlog of 600 emails of another organization, the email was sent "
              f"{position}th of {len(sent)}")
        assert len(sent) >= 601
        assert position <= 2 * BATCH[MAIL], f"sent {position}th: more than two batches after the backlog began"
    finally:
        sink.stop()


def test_a_dead_workers_expired_lease_does_not_hold_its_organizations_webhooks(engine, server):
    """The per-organization cap counted a killed worker's `running` job until the heartbeat
    requeued it (a lease later): live workers sent none of that organization's other webhooks
    meanwhile. A job whose lease ran out is no thread in use."""
    from datetime import timedelta

    from sqlalchemy import delete, insert, select

    from largesse import db
    from largesse.delivery import jobs as job_queue
    from largesse.delivery.models import jobs
    from largesse.timeutil import utcnow

    org = create_org(engine, server.url, name="Killed Worker")
    now = utcnow()
    dead = {**job_queue.queued_row(kind="deliver_webhook", organization_id=org.id, payload={}),
            "status": job_queue.RUNNING, "locked_by": "killed", "locked_until": now - timedelta(seconds=1)}
    with db.write(engine) as conn:
        dead_id = conn.execute(insert(jobs).values(dead).returning(jobs.c.id)).scalar_one()
        waiting_id = conn.execute(insert(jobs).values(job_queue.queued_row(
            kind="deliver_webhook", organization_id=org.id, payload={})).returning(jobs.c.id)).scalar_one()
    claimed = []
    try:
        claimed = [j.id for j in job_queue.claim(engine, "alive", limit=20, lease_seconds=10, lane=job_queue.WEBHOOK,
                                                 org_cap=1)]
        assert waiting_id in claimed and dead_id not in claimed
    finally:
        job_queue.release(engine, "alive", [i for i in claimed if i != waiting_id])  # other tests' jobs go back
        with db.write(engine) as conn:
            conn.execute(delete(jobs).where(jobs.c.id.in_([dead_id, waiting_id])))
            assert conn.execute(select(jobs.c.id).where(jobs.c.id.in_([dead_id, waiting_id]))).first() is None


def test_a_customers_sub_organizations_share_its_webhook_threads(engine, server):
    """Any key may create sub-organizations (POST /organizations): counted apart, a customer with
    as many of them as there are webhook threads, each with a hanging receiver, held them all.
    The cap counts an organization with its sub-organizations, their own sub-organizations too."""
    from sqlalchemy import delete, select

    from largesse import db
    from largesse.delivery import jobs as job_queue
    from largesse.delivery.models import jobs
    from tests.conftest import Org

    customer = create_org(engine, server.url, name="Many Subs")
    other = create_org(engine, server.url, name="Other Customer")
    subs = []
    with customer.http() as http:
        for n in range(3):
            created = ok(http.post("/organizations", json={"name": f"Sub {n}", "website": "https://s.example.com",
                                                         "with_api_key": True}))["organization"]
            subs.append(Org(created["id"], created["api_key"], None, customer.member_email, customer.base_url))
    with subs[0].http() as http:  # a sub-organization's own sub-organization: the same customer
        created = ok(http.post("/organizations", json={"name": "Sub of sub", "website": "https://s.example.com",
                                                     "with_api_key": True}))["organization"]
        subs.append(Org(created["id"], created["api_key"], None, customer.member_email, customer.base_url))
    ours = [org.id for org in (customer, other, *subs)]
    with db.write(engine) as conn:
        for org_id in ours:
            conn.execute(jobs.insert().values(job_queue.queued_row(
                kind="deliver_webhook", organization_id=org_id, payload={})))
    claimed = []
    try:
        for _ in range(500):  # one claim per webhook thread, none finishing: receivers that hang
            taken_now = job_queue.claim(engine, "threads", limit=1, lease_seconds=30, lane=job_queue.WEBHOOK,
                                        org_cap=1)
            if not taken_now:
                break
            claimed += taken_now  # (other tests' leftover jobs too: handed back below)
        taken = [job.organization_id for job in claimed if job.organization_id in ours]
        assert sorted(taken) == sorted([other.id, next(t for t in taken if t != other.id)]), taken
    finally:
        job_queue.release(engine, "threads", [job.id for job in claimed if job.organization_id not in ours])
        with db.write(engine) as conn:
            conn.execute(delete(jobs).where(jobs.c.organization_id.in_(ours)))
            assert conn.execute(select(jobs.c.id).where(jobs.c.organization_id.in_(ours))).first() is None
