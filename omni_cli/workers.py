"""Bridge worker processes: several processes on one port, so the bridge uses every core.

The bridge keeps no state between connections (sessions live in the service), so any of its
processes may carry any websocket. The first process binds the port with ``SO_REUSEPORT``
(picking one when the port is 0); the workers then listen on that same port, and the kernel
spreads new connections between them. Each worker is a fresh interpreter (``spawn``: no event
loop, gRPC or engine state inherited from the parent) running the bridge alone, in front of
the service over gRPC. They go with their parent: it sends them SIGTERM when it stops (each
closes its websockets with 1001, as a stopping bridge does), and a worker whose parent died
without saying so (SIGKILL) stops too, woken by the parent's pidfd.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from multiprocessing.process import BaseProcess

from omni_cli.config import BridgeSettings
from omni_cli.logs import configure_logging

STOP_WAIT_S = 15.0  # how long a stopping worker gets before it is killed


class BridgeWorkers:
    """The worker processes of one bridge port."""

    def __init__(self, processes: list[BaseProcess]) -> None:
        self.processes = processes

    @classmethod
    def start(cls, settings: BridgeSettings, count: int) -> BridgeWorkers:
        """Starts ``count`` workers for ``settings`` (whose port is already bound)."""
        context = multiprocessing.get_context("spawn")
        processes: list[BaseProcess] = [
            context.Process(
                target=work, args=(settings, os.getpid()), name=f"bridge-worker-{n}", daemon=True
            )
            for n in range(1, count + 1)
        ]
        for process in processes:
            process.start()
        return cls(processes)

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


def work(settings: BridgeSettings, parent_pid: int) -> None:
    """A worker's life: the bridge on the shared port until SIGTERM or its parent goes."""
    import uvloop

    from omni_cli.launch import run_bridge_worker

    configure_logging(settings.log_level, settings.log_format)
    uvloop.run(run_bridge_worker(settings, parent_pid))


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
