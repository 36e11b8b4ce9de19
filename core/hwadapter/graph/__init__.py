"""The graph layer: graphs built (`GraphBuilder`), optimised and partitioned over devices into a `Plan` (`partition`),
run (`Plan.run`, or node by node with the reference executor `run`). The IR itself is the plugin API's
(hwadapter.api.ir)."""
from ..api.ir import Graph, Node, Value  # noqa: F401
from .builder import GraphBuilder  # noqa: F401
from .memory import plan_memory  # noqa: F401
from .partitioner import partition  # noqa: F401
from .plan import Plan  # noqa: F401
from .reference import run  # noqa: F401
