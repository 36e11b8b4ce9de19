"""Dispatch: routes per (op, dtypes) on a Device, and CPU fallback that is never silent."""
