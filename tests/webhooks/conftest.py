import pytest

# The delivery kit's quick-worker settings serve webhook deliveries too.
from tests.delivery.conftest import fast  # noqa: F401
from tests.webhooks.kit import Receiver


@pytest.fixture
def receiver():
    started = Receiver()
    yield started
    # Close the socket too: a listening socket nobody serves accepts connections and never
    # answers, so later tests' workers would wait out the delivery timeout on its events.
    started.server.shutdown()
    started.server.server_close()
