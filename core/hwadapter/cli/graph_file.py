"""Reading a graph file written from Graph.to_json(), with errors that say what is wrong with it."""
from __future__ import annotations

import json
from pathlib import Path

from hwadapter.errors import HwAdapterError


class _BadInput(Exception):
    """What is wrong with the command's input, worded for the user (exit status 2)."""


def load_graph(path: str):
    """The Graph in a JSON file written from Graph.to_json(); _BadInput saying what is wrong with it otherwise."""
    from hwadapter.graph import Graph
    fix = "write it with json.dump(graph.to_json(), f) (graph: hwadapter.jit.get_graph(fn, *args))"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise _BadInput(f"{path}: is a directory, not a graph file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise _BadInput(f"{path}: cannot be read ({err})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        ended = err.msg.startswith("Unterminated") or err.pos >= len(text.rstrip())
        cut = " (the file ends too early: is it truncated?)" if ended else ""
        raise _BadInput(f"{path}: not valid JSON: {err.msg} (line {err.lineno}, column {err.colno}){cut}. "
                        f"Fix: {fix}") from None
    except RecursionError:
        raise _BadInput(f"{path}: not valid JSON (nested too deeply). Fix: {fix}") from None
    if not isinstance(doc, dict):
        raise _BadInput(f"{path}: holds a JSON {type(doc).__name__}, not a graph (an object with inputs, outputs, "
                        f"values and nodes). Fix: {fix}")
    try:
        graph = Graph.from_json(doc)
    except KeyError as err:
        raise _BadInput(f"{path}: not a graph written by Graph.to_json(): {err} is missing. Fix: {fix}") from None
    except (TypeError, ValueError, AttributeError, IndexError) as err:
        raise _BadInput(f"{path}: not a graph written by Graph.to_json(): {type(err).__name__}: {err}. "
                        f"Fix: {fix}") from None
    validate = getattr(graph, "validate", None)
    if validate is not None:
        try:
            validate()
        except HwAdapterError as err:
            raise _BadInput(f"{path}: {err}") from None
    return graph
