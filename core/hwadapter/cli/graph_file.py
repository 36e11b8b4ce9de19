"""Reading a graph file written by Graph.save, with errors that say what is wrong with it."""
from __future__ import annotations

from hwadapter.api.errors import InvalidArgumentError
from hwadapter.api.ir import Graph


class _BadInput(Exception):
    """What is wrong with the command's input, worded for the user (exit status 2)."""


def load_graph(path: str) -> Graph:
    """The Graph in a file written by Graph.save (Graph.load); _BadInput saying what is wrong with it otherwise."""
    try:
        return Graph.load(path)
    except FileNotFoundError:
        raise _BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise _BadInput(f"{path}: is a directory, not a graph file") from None
    except UnicodeDecodeError as err:
        raise _BadInput(f"{path}: not a graph file: not UTF-8 text ({err.reason} at byte {err.start}). Fix: write it "
                        f"with graph.save(path)") from None
    except OSError as err:
        raise _BadInput(f"{path}: cannot be read ({err})") from None
    except InvalidArgumentError as err:
        raise _BadInput(str(err)) from None
