"""Memory for a compiled subgraph's intermediates: values whose lives do not overlap share one allocation (what a
subgraph backend would otherwise write again; the graph layer's planner does the same for plans)."""
from __future__ import annotations


def share(lives: dict) -> tuple[dict, list]:
    """`lives`: {value: (first step, last step, bytes)} -> ({value: slot}, [bytes of each slot]). Steps run in
    order on one queue, so a slot whose last reader came before a value's first step can hold it; the smallest
    such slot that is large enough is taken, else a new one."""
    slots: list = []  # [bytes, free after this step]
    where = {}
    for value, (first, last, nbytes) in sorted(lives.items(), key=lambda item: item[1][0]):
        free = [i for i, (size, until) in enumerate(slots) if until < first and size >= nbytes]
        if free:
            i = min(free, key=lambda j: slots[j][0])
        else:
            i = len(slots)
            slots.append([max(nbytes, 1), last])
        slots[i][1] = last
        where[value] = i
    return where, [size for size, _ in slots]
