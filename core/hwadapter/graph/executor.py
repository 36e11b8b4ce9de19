"""The reference executor: a graph run node by node through eager dispatch, what subgraph backends are checked against."""
from __future__ import annotations

from ..dispatch.dispatcher import dispatch
from ..tensor import Tensor, to_tensor


def run(graph, inputs: dict, device="cpu") -> dict:
    """Run `graph` on `device` with inputs by name (Tensors or array-likes); its outputs by name, as Tensors."""
    env = {k: v if isinstance(v, Tensor) else to_tensor(v, device=device) for k, v in inputs.items()}
    for n in graph.nodes:
        out = dispatch(n.op, tuple(env[i] for i in n.inputs), n.attrs)
        env.update(zip(n.outputs, out if isinstance(out, tuple) else (out,)))
    return {o: env[o] for o in graph.outputs}
