"""What the simulation knows independently of the database: every order the services
acknowledged, every reward's outcome the simulation caused, the money it put in.

The checks (checks.py) compare the database with this; the database never writes it,
except for facts only the database can tell (a reward's expires_at, its expiry by the sweep).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from largesse.auth import Credentials


class Violation(AssertionError):
    """An invariant does not hold: a bug (or a wrong expectation) to look at."""


@dataclass
class RewardM:
    id: str
    org: str
    order_id: str
    method: str  # EMAIL | LINK
    email: str | None
    products: list[str]
    cost_cents: int  # denomination + fee: what a refund gives back
    expires_at: datetime | None
    outcome: str = "ACTIVE"  # ACTIVE, or REDEEMED / CANCELED when the simulation did it
    product: str | None = None  # the product it was redeemed for
    tokens: list[str] = field(default_factory=list)  # links the simulation holds (response, emails)


@dataclass
class OrderM:
    id: str
    org: str
    external_id: str | None
    body: bytes
    total_cents: int
    reward_ids: list[str]


@dataclass
class OrgM:
    id: str
    credentials: Credentials
    balance_id: str
    member_email: str
    funded_cents: int  # every credit the simulation made (sandbox credit, fundings)
    orders: list[str] = field(default_factory=list)
    by_external_id: dict[str, str] = field(default_factory=dict)
    references: dict[str, int] = field(default_factory=dict)  # funding reference -> cents credited
    fee_basis_points: int = 0
    fee_flat_cents: int = 0


@dataclass
class Model:
    orgs: list[OrgM] = field(default_factory=list)
    orders: dict[str, OrderM] = field(default_factory=dict)
    rewards: dict[str, RewardM] = field(default_factory=dict)
    reward_order: list[str] = field(default_factory=list)  # creation order, for seeded picks
    # Jobs claimed by a worker that died or gave up on its batch: `running` until their lease ends.
    abandoned_jobs: set[int] = field(default_factory=set)
    codes_loaded: int = 0  # inventory codes imported
    codes_issued: int = 0  # inventory codes paid out by redemptions
    emails: int = 0
    duplicate_emails: int = 0
    emailed: dict[str, int] = field(default_factory=dict)  # reward id -> emails received

    def org(self, org_id: str) -> OrgM:
        return next(o for o in self.orgs if o.id == org_id)

    def add_order(self, order: OrderM, rewards: list[RewardM]) -> None:
        self.orders[order.id] = order
        org = self.org(order.org)
        org.orders.append(order.id)
        if order.external_id is not None:
            org.by_external_id[order.external_id] = order.id
        for reward in rewards:
            self.rewards[reward.id] = reward
            self.reward_order.append(reward.id)
