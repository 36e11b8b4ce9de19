"""The typed primitive IR: parameters, SSA value nodes and stores."""

from dataclasses import dataclass, field

from .functors import Functor
from .reducers import Reducer


@dataclass(frozen=True)
class Param:
    """A buffer parameter of a program: name, concrete dtype and kind ("in" or "out")."""

    name: str
    dtype: str
    kind: str

    @property
    def is_input(self) -> bool:
        """True for inputs (read-only buffers)."""
        return self.kind == "in"


class Value:
    """One SSA node of a traced kernel; arithmetic operators build binary primitives."""

    dtype: str
    #: the DSL's (binary, unary) builders: dsl.py sets them when it is imported (it imports this module)
    builders: tuple = ()

    def _bin(self, op, other, swap=False):
        binary = Value.builders[0]
        return binary(op, other, self) if swap else binary(op, self, other)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __mod__(self, o): return self._bin("mod", o)
    def __pow__(self, o): return self._bin("pow", o)

    def __neg__(self):
        return Value.builders[1]("neg", self)


@dataclass(eq=False)
class Const(Value):
    """A constant (kp.init) of a given dtype."""

    value: object
    dtype: str


@dataclass(eq=False)
class Load(Value):
    """An element of an input, addressed through the iteration domain (read / read_broadcast / read_reduce)."""

    param: str
    dtype: str


@dataclass(eq=False)
class CycleLoad(Value):
    """An element of an input addressed by the flat domain index modulo the input's size (cycle_binary)."""

    param: str
    dtype: str


@dataclass(eq=False)
class Apply(Value):
    """A functor applied to operand values."""

    functor: Functor
    args: tuple
    attrs: tuple
    dtype: str


@dataclass(eq=False)
class Reduce(Value):
    """A reduction of ``arg`` over the program's reduced axes; broadcasts back when reused."""

    reducer: Reducer
    arg: Value
    axes: object          # as written (None = the program's axes); normalised on the Program
    keepdims: bool
    dtype: str


@dataclass(eq=False)
class Store:
    """Write ``value`` to output ``param``."""

    param: str
    value: Value
    kind: str = field(default="full")     # "full": domain shape; "kept": reduced axes dropped/kept as 1
    keepdims: bool = False


def operands(node: Value) -> tuple:
    """The values ``node`` reads."""
    if isinstance(node, Apply):
        return node.args
    if isinstance(node, Reduce):
        return (node.arg,)
    return ()


def topo_order(roots) -> list:
    """Nodes reachable from ``roots`` with operands first; deterministic (depth-first, operand order)."""
    seen, order = set(), []
    stack = [(r, False) for r in reversed(list(roots))]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(operands(node)) if id(a) not in seen)
    return order


def describe(nodes, stores) -> str:
    """A readable, deterministic listing of the IR (one node per line)."""
    names = {id(n): f"%{i}" for i, n in enumerate(nodes)}
    lines = []
    for n in nodes:
        if isinstance(n, Const):
            text = f"init {n.value!r}"
        elif isinstance(n, Load):
            text = f"load {n.param}"
        elif isinstance(n, CycleLoad):
            text = f"cycle_load {n.param}"
        elif isinstance(n, Apply):
            attrs = "".join(f" {k}={v}" for k, v in n.attrs)
            text = f"{n.functor.name}({', '.join(names[id(a)] for a in n.args)}){attrs}"
        else:
            text = f"reduce.{n.reducer.name}({names[id(n.arg)]})"
        lines.append(f"{names[id(n)]}: {n.dtype} = {text}")
    for s in stores:
        lines.append(f"store {s.param} <- {names[id(s.value)]} ({s.kind})")
    return "\n".join(lines)
