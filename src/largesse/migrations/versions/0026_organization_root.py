"""Organizations know the top of their line of parents (root_organization_id)

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The webhook threads' share per customer (delivery.jobs.claim) counts an organization with
    # the sub-organizations it created: any key may create them, and counted apart, a customer
    # with eight of them, each with a hanging receiver, held every webhook thread.
    conn = op.get_bind()
    if "root_organization_id" not in {c["name"] for c in sa.inspect(conn).get_columns("organizations")}:
        op.add_column("organizations", sa.Column("root_organization_id", sa.String(20), nullable=True))
    orgs = sa.table("organizations", sa.column("id", sa.String), sa.column("parent_organization_id", sa.String),
                    sa.column("root_organization_id", sa.String))
    parent = dict(conn.execute(sa.select(orgs.c.id, orgs.c.parent_organization_id)).all())
    root: dict[str, str] = {}

    def root_of(org_id: str) -> str:
        line = []
        while org_id not in root and parent.get(org_id) is not None and org_id not in line:
            line.append(org_id)
            org_id = parent[org_id]
        top = root.get(org_id, org_id)
        for member in line + [org_id]:
            root[member] = top
        return top

    rows = [{"org": org_id, "root": root_of(org_id)} for org_id in parent]
    if rows:
        conn.execute(sa.update(orgs).where(orgs.c.id == sa.bindparam("org"))
                     .values(root_organization_id=sa.bindparam("root")), rows)


def downgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("root_organization_id")
