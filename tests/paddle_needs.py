"""Why a Paddle bridge test cannot run here (None when it can): Paddle, hwadapter-paddle and a C++ compiler."""
from __future__ import annotations

import importlib.util
import shutil

PADDLE_SKIP = None
if importlib.util.find_spec("paddle") is None:
    PADDLE_SKIP = "paddlepaddle is not installed (make test installs it: the root pyproject's `paddle` extra)"
elif importlib.util.find_spec("hwadapter_paddle") is None:
    PADDLE_SKIP = "hwadapter-paddle is not installed (make test installs it: pip install -e bridges/paddle)"
elif shutil.which("g++") is None:
    PADDLE_SKIP = "g++ is needed to build the Paddle shim"
