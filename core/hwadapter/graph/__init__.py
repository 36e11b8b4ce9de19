"""The graph IR shared by traced functions and imported models, and its reference executor."""
from .ir import Graph, GraphBuilder, Node, Value  # noqa: F401
