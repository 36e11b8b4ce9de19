"""The graph IR shared by traced functions and imported models; `builder`, `partition` and `executor` sit above
dispatch."""
from ..api.ir import Graph, Node, Value  # noqa: F401


def __getattr__(name):
    # lazy: the plugin API imports the IR from here, and the builder, partitioner and executor import the frontend
    if name == "GraphBuilder":
        from .builder import GraphBuilder
        return GraphBuilder
    if name == "run":
        from .reference import run
        return run
    if name == "partition":
        from .partitioner import partition
        return partition
    if name == "Plan":
        from .plan import Plan
        return Plan
    if name == "plan_memory":
        from .memory import plan_memory
        return plan_memory
    raise AttributeError(f"module 'hwadapter.graph' has no attribute {name!r}")
