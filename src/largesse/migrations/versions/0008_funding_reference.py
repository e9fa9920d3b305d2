"""funding: operator credits with a reference (credited once)

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
