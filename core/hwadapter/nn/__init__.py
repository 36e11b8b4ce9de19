"""Neural-network functions (hwadapter.nn.functional)."""
from . import functional  # noqa: F401
