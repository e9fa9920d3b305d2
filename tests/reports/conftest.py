"""Reports test kit: the webhook fixture of the fraud tests (events are asserted in the outbox)."""

from tests.fraud.conftest import webhook  # noqa: F401
