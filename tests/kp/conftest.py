"""hwadapter_kp is independent of the hwadapter core (numpy only), so its tests must run with just
kernel_primitives on the path.  The repository-wide autouse ``clean_state`` fixture checks device
memory of the core; kernel-primitive tests touch no device, so they replace it with a no-op."""

import pytest


@pytest.fixture(autouse=True)
def clean_state():
    """No core state to reset for kernel-primitive tests."""
    yield
