"""The optional fast form of a schedule: its steps as one straight-line Python function (what torch.fx does), with
the executor loop's checks inline. Kernels and constants are its globals, each value a local deleted after its last
reader, a host chain's numpy calls written out. It saves the loop's per-step overhead (benchmarks/graph.py, the MLP
at batch 1); delete this module and plans run through the loop alone."""
from __future__ import annotations

from ..api.errors import HwAdapterError
from .executor import failed, judge, located
from .steps import Run


class Straight:
    """A schedule as one generated function: `straight(staged) -> output data`; `source` is its text."""

    def __init__(self, sched):
        self.steps = sched.steps
        self.filename = f"<hwadapter plan {id(self):x}>"
        names, self.where = {"_judge": judge}, {}
        for s, data in sched.constants.items():
            names[f"v{s}"] = data
        lines = ["def plan(staged):"]  # the list is emptied, so that a staged input dies at its last reader too
        if sched.inputs:
            lines.append(f"    {''.join(f'v{s}, ' for s, _, _ in sched.inputs)}= staged")
        lines.append("    staged.clear()")
        for k, st in enumerate(self.steps):
            self._step(k, st, lines, names)
        lines.append(f"    return [{''.join(f'v{s}, ' for s, _ in sched.outputs)}]")
        self.source = "\n".join(lines)
        scope: dict = {}
        exec(compile(self.source + "\n", self.filename, "exec"), names, scope)  # our own text, no user input
        self.function = scope["plan"]

    def _step(self, k: int, st, lines: list, names: dict) -> None:
        """Lines for step `k`: its call (or a host chain's calls), the inline check of each result, its drops."""
        names[f"k{k}"], names[f"s{k}"], names[f"C{k}"] = st.call, st, st.array
        args = ", ".join(f"v{i}" for i in st.ins)
        if st.into is not None:  # in place: written over the input the memory plan chose
            args += f", out=v{st.ins[st.into]}"
        if st.attrs:
            names[f"a{k}"] = st.attrs
            args += (", " if args else "") + f"**a{k}"
        single = st.run is Run.KERNEL
        target = f"v{st.outs[0]}" if single else "".join(f"v{o}, " for o in st.outs)
        chain = getattr(st.call, "inline", None) if st.run is Run.HOST_CHAIN else None
        if chain is not None:
            start = len(lines)
            lines += _inline(k, chain, st.ins, st.outs, names)
            self.where.update(dict.fromkeys(range(start + 1, len(lines) + 1), k))
        else:
            self.where[len(lines) + 1] = k
            lines.append(f"    {target} = k{k}({args})" if target else f"    k{k}({args})")  # no outputs: a call
        for j, o in enumerate(st.outs):
            v = st.expect[j]
            names[f"S{k}_{j}"], names[f"D{k}_{j}"] = v.shape, v.dtype
            self.where[len(lines) + 1] = self.where[len(lines) + 2] = k
            lines.append(f"    if v{o}.__class__ is not C{k} or v{o}.shape != S{k}_{j} or v{o}.dtype != D{k}_{j}:")
            lines.append(f"        v{o} = _judge(s{k}, {j}, v{o})")
        if st.drops:
            lines.append(f"    del {', '.join(f'v{d}' for d in st.drops)}")

    def __call__(self, staged) -> list:
        """The function on the staged inputs; a failing step is a KernelExecutionError naming it."""
        try:
            return self.function(staged)
        except HwAdapterError as err:
            raise located(self.steps[self._failing(err)], err)
        except Exception as err:
            raise failed(self.steps[self._failing(err)], err) from err

    def _failing(self, err: BaseException) -> int:
        """The index of the step whose line of the generated function raised `err`."""
        tb, k = err.__traceback__, 0
        while tb is not None:  # the generated function's frame says which line, hence which step, failed
            if tb.tb_frame.f_code.co_filename == self.filename:
                k = self.where.get(tb.tb_lineno, 0)
            tb = tb.tb_next
        return k


def _inline(k: int, chain, ins, outs, names: dict) -> list:
    """Lines computing a host chain (see hostchain.py) for step `k`: kernels and literals become globals in `names`,
    intermediates are locals deleted after their last reader."""
    inputs, ops, outputs = chain
    local = {n: f"v{s}" for n, s in zip(inputs, ins)}
    last = {}
    for j, (_, operands, _, _, _) in enumerate(ops):
        for n in operands:
            if n is not None:
                last[n] = j
    lines = []
    for j, (kernel, operands, lits, result, kw) in enumerate(ops):
        names[f"k{k}_{j}"] = kernel
        args = []
        for m, n in enumerate(operands):
            if n is None:
                names[f"l{k}_{j}_{m}"] = lits[m]
                args.append(f"l{k}_{j}_{m}")
            else:
                args.append(local[n])
        if kw:
            names[f"a{k}_{j}"] = kw
            args.append(f"**a{k}_{j}")
        local[result] = f"t{k}_{j}"
        lines.append(f"    t{k}_{j} = k{k}_{j}({', '.join(args)})")
        dead = [f"t{k}_{i}" for i, (_, _, _, r, _) in enumerate(ops) if last.get(r) == j and r not in outputs]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    {''.join(f'v{o}, ' for o in outs)}= {''.join(local[n] + ', ' for n in outputs)}")
    return lines
