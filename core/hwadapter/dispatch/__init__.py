"""Kernel registry, dispatch, and CPU fallback that is never silent."""
