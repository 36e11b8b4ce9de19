"""A seeded random generator per device, computed with hwadapter's own integer ops, that works inside to_static.

Each draw hashes (seed, counter, element index) with a keyed power map over the prime field of p = 2**31 - 1
(three rounds of x -> (x + k)**5 mod p, a bijection because gcd(5, p - 1) = 1, as in the MiMC cipher), using only
int64 add, multiply and remainder: every device that runs those runs the generator, no bit-shift or xor kernel
needed, and no product exceeds 2**62. The counter is a buffer (hwadapter.autograd.buffer) on the device that each
draw advances with set_value, so a captured plan reads it and writes it back on every call instead of baking one
draw into the graph. `hw.seed(n)` restarts every device's stream: its new generator is noticed at the next draw.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from .api import dtypes as _dt
from .api import shapes
from .api.errors import InvalidArgumentError, UnsupportedDTypeError
from . import autograd
from . import trace as _trace
from .ops import creation
from .ops.elementwise import add, cast, multiply, remainder
from .ops.manipulation import _reshape
from .tensor import Tensor, target_device

__all__ = ["uniform", "reset", "state"]

P = (1 << 31) - 1  # the Mersenne prime 2**31 - 1: (x + k)**2 of residues stays below 2**63
_ROUNDS = (0x3C6EF372 % P, 0x1B873593 % P, 0x68E31DA4 % P)  # round constants of the key schedule (arbitrary odd)
_BITS = {"float16": 11, "float32": 24, "float64": 31}  # random bits a draw keeps: exactly representable, below 1

_lock = threading.Lock()
_states: dict = {}  # device name -> (seed buffer, counter buffer), both int64 0-d on that device
_seen = {"seed": 0}  # the seed of the last hw.seed (0 before any)


def _seed_residue(seed: int) -> int:
    """A seed of up to 128 bits as a residue mod p, its bits spread first (seeds 0, 1, 2 give unrelated streams)."""
    h = 0x243F6A8885A308D3
    while True:
        h = ((h ^ (seed & 0xFFFFFFFFFFFFFFFF)) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & ((1 << 64) - 1)
        seed >>= 64
        if not seed:
            return (h ^ (h >> 29)) % P


def reset(seed: int) -> None:
    """Restart every device's stream at counter 0 under `seed` (what hw.seed does, through creation.on_seed)."""
    seed = shapes.int_arg("seed", "value", seed, low=0, high=(1 << 128) - 1)
    _seen["seed"] = seed
    residue = _seed_residue(seed)
    for seed_buf, counter_buf in list(_states.values()):
        _write(seed_buf, residue)
        _write(counter_buf, 0)


def _write(buf: Tensor, value: int) -> None:
    """buf = value, outside the computation: inside a trace the restart happened before this call (recording it
    would restart the stream on every run of the plan), so the buffer's data is replaced directly."""
    fresh = autograd.buffer(np.int64(value), device=buf.device)
    if _trace.active() is None:
        buf.set_value(fresh)
    else:
        buf._data = fresh._data


def _base(dev):
    """The real device behind a tracing one (the state lives there, captured by the trace as device state)."""
    return getattr(dev, "base", dev)


def state(device=None) -> tuple:
    """(seed, counter): the int64 0-d buffers of `device`'s stream, made on first use."""
    dev = _base(target_device(device))
    key = str(dev)
    with _lock:
        hit = _states.get(key)
        if hit is None or hit[0].device is not dev:  # none yet, or made on a device object since replaced (reset)
            hit = _states[key] = (autograd.buffer(np.int64(_seed_residue(_seen["seed"])), device=dev),
                                  autograd.buffer(np.int64(0), device=dev))
    return hit


def _pow5(x: Tensor) -> Tensor:
    """x**5 mod p of residues (each product below 2**62)."""
    x2 = remainder(multiply(x, x), P)
    x4 = remainder(multiply(x2, x2), P)
    return remainder(multiply(x4, x), P)


def _round(x: Tensor, key: Tensor) -> Tensor:
    return _pow5(remainder(add(x, key), P))


def _round_keys(seed: Tensor, counter: Tensor) -> list:
    """Three round keys of this draw, from the seed and the counter (0-d: the cost is a few scalar ops)."""
    k = _round(_round(remainder(counter, P), seed), seed)
    keys = []
    for c in _ROUNDS:
        k = _round(k, c)
        keys.append(k)
    return keys


def uniform(shape, dtype="float32", device=None) -> Tensor:
    """Uniform [0, 1) values from `device`'s stream (advancing it): 24 random bits for float32, 11 for float16,
    31 for float64."""
    dims = shapes.dims("uniform", "shape", shape)
    try:
        dt = _dt.as_dtype(dtype)
    except UnsupportedDTypeError as err:
        raise UnsupportedDTypeError(f"uniform: {err}") from None
    if dt.name not in _BITS:
        raise UnsupportedDTypeError(f"uniform: random values need a floating dtype, not {dt.name}. Fix: pass "
                                    f"dtype='float32'")
    n = math.prod(dims)
    if n >= P:
        raise InvalidArgumentError(f"uniform: {n} values in one draw; the generator numbers at most {P - 1} per "
                                   f"draw. Fix: draw in parts")
    dev = target_device(device)
    seed, counter = state(dev)  # buffers: a trace reads them as state inputs (the grad hook lifts them)
    with autograd.no_grad():
        k1, k2, k3 = _round_keys(seed, counter)
        counter.set_value(add(counter, 1))
        index = creation.arange(0, n, dtype="int64", device=dev)
        x = _round(_round(_round(index, k1), k2), k3)
        bits = _BITS[dt.name]
        low = remainder(x, 1 << bits) if bits < 31 else x
        u = multiply(cast(low, dt), 2.0 ** -bits)
    return _reshape(u, dims)


creation.on_seed.append(reset)  # hw.seed: every stream restarts now (captured plans read the buffers next run)
