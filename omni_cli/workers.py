"""Bridge worker processes: several processes on one port, so the bridge uses every core.

The bridge keeps no state between connections (sessions live in the service), so any of its
processes may carry any websocket. The first process binds the port with ``SO_REUSEPORT``
(picking one when the port is 0); the workers then listen on that same port, and the kernel
spreads new connections between them. Each worker is a fresh interpreter (``spawn``: no event
loop, gRPC or engine state inherited from the parent) running the bridge alone, in front of
the service over gRPC. The parent says it is up only once every worker listens
(:meth:`BridgeWorkers.listening`), so no client is told of a port some of whose processes are
still starting. They go with their parent: it sends them SIGTERM when it stops (each closes its
websockets with 1001, as a stopping bridge does), and a worker whose parent died without saying
so (SIGKILL) stops too, woken by the parent's pidfd (:func:`parent_gone`).

What a worker runs is not here but given to :meth:`BridgeWorkers.start` by its caller
(:func:`omni_cli.launch.bridge_worker`): the worker runs the bridge as the launcher does, so
this module importing the launcher would make the two import each other.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event

from omni_cli.config import BridgeSettings

STOP_WAIT_S = 15.0  # how long a stopping worker gets before it is killed
LISTEN_WAIT_S = 120.0  # how long a starting worker may take to listen (imports on a busy box)

# A worker's life: (settings, the parent's pid, set once its socket listens). A module-level
# function, so that ``spawn`` can name it to the fresh interpreter.
WorkerMain = Callable[[BridgeSettings, int, Event], None]


class WorkerFailed(RuntimeError):
    """A bridge worker ended, or did not listen in time, while starting."""


class BridgeWorkers:
    """The worker processes of one bridge port."""

    def __init__(self, processes: list[BaseProcess], listening: list[Event]) -> None:
        self.processes = processes
        self._listening = listening  # each set by its worker once its socket listens

    @classmethod
    def start(cls, settings: BridgeSettings, count: int, main: WorkerMain) -> BridgeWorkers:
        """Starts ``count`` workers running ``main`` for ``settings`` (whose port is already
        bound)."""
        context = multiprocessing.get_context("spawn")
        listening = [context.Event() for _ in range(count)]
        processes: list[BaseProcess] = [
            context.Process(
                target=main,
                args=(settings, os.getpid(), ready),
                name=f"bridge-worker-{n}",
                daemon=True,
            )
            for n, ready in enumerate(listening, start=1)
        ]
        for process in processes:
            process.start()
        return cls(processes, listening)

    async def listening(self, timeout_s: float = LISTEN_WAIT_S) -> None:
        """Returns once every worker listens; raises WorkerFailed if one ended first or the
        time ran out."""
        await asyncio.to_thread(self._wait_listening, timeout_s)

    def _wait_listening(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for process, ready in zip(self.processes, self._listening, strict=True):
            while not ready.wait(0.1):
                if not process.is_alive():
                    raise WorkerFailed(f"{process.name} ended (exit {process.exitcode}) starting")
                if time.monotonic() > deadline:
                    raise WorkerFailed(f"{process.name} did not listen within {timeout_s:.0f} s")

    async def stop(self) -> None:
        """Stops every worker: SIGTERM, then SIGKILL for one that is still there."""
        for process in self.processes:
            process.terminate()
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        for process in self.processes:
            process.join(STOP_WAIT_S)
            if process.is_alive():
                process.kill()
                process.join()


async def parent_gone(parent_pid: int) -> None:
    """Returns once the process that started this one has ended (its pidfd turns readable)."""
    try:
        pidfd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        return
    gone = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(pidfd, gone.set)
    try:
        await gone.wait()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
