"""Launch batching: a runtime.Queue that submits its kernels in batches.

PoCL wakes its worker threads for every command that is ready to run; on a small host each wake-up preempts the
Python thread that is launching the next op (an eager add took several times as long). So, as GPU drivers do until
clFlush, kernels queue behind a gate (a user event) and are released together: every `BATCH` launches, and before
anything waits for the queue (the runtime calls `flush` before a copy, a synchronize, an event).
"""
from __future__ import annotations

import atexit
import weakref

import pyopencl as cl

from ..runtime import Queue

_queues: weakref.WeakSet = weakref.WeakSet()  # every BatchedQueue, released at exit (flush)


class BatchedQueue(Queue):
    """A Queue whose kernels wait behind a gate until `BATCH` are held or `flush` is called."""

    BATCH = 64

    def __init__(self, queue: cl.CommandQueue):
        super().__init__(queue)
        self._gate = None  # the cl.UserEvent this queue's held work waits for, or None when nothing is held
        self._held = 0
        _queues.add(self)

    def launch(self, kernel: cl.Kernel, global_size: tuple, local_size: tuple | None, arrays=()) -> None:
        """Enqueue `kernel` in the current batch, its first arguments set to the buffers of `arrays` (DeviceArrays)
        under the queue's lock."""
        with self._lock:
            for i, array in enumerate(arrays):
                kernel.set_arg(i, array.handle)
            if self._gate is None:
                self._gate = cl.UserEvent(self.queue.context)
                cl.enqueue_barrier(self.queue, wait_for=[self._gate])  # in order: what follows waits for the gate
            cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)
            self._held += 1
            if self._held >= self.BATCH:
                self._release()

    def flush(self) -> "BatchedQueue":
        """Submit the held work (call before waiting for anything on this queue); returns the queue."""
        if self._gate is not None:
            with self._lock:
                self._release()
        return self

    def _release(self) -> None:
        if self._gate is not None:
            self._gate.set_status(cl.command_execution_status.COMPLETE)
            self._gate, self._held = None, 0
            self.queue.flush()

    def __del__(self):
        self.flush()  # a queue released with work held behind an incomplete event would never finish


@atexit.register
def _release_all() -> None:
    for queue in list(_queues):
        queue.flush()
