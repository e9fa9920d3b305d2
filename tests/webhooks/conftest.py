# The delivery kit's quick-worker settings serve webhook deliveries too.
from tests.delivery.conftest import fast  # noqa: F401
