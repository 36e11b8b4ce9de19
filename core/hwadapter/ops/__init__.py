"""The op set, one module per family; `api` assembles them (and binds Tensor's operators), imported with the package."""
from . import api  # noqa: F401  hwadapter.ops.api, whichever op module is imported first
