"""``scripts/cluster``'s runner (:mod:`omni_cli.cluster`) as a child process of another program:
the tests' local cluster and ``scripts/bench_admission.py`` start, read and stop it alike."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omni_cli.cluster import free_port

ROOT = Path(__file__).resolve().parents[1]
STOP_WAIT_S = 60.0  # the replicas' own shutdown grace, and then some
PORT_TRIES = 3  # starts of the runner, each on fresh ports, when HAProxy could not bind
PORT_TAKEN = b"Address already in use"


class ClusterChild:
    """``python -m omni_cli.cluster`` with its output in ``log_path``; its state file (the
    processes and ports it started) is read once the cluster wrote it."""

    def __init__(
        self,
        replicas: int,
        serve_args: Sequence[str],
        state_file: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cluster_args: Sequence[str] = (),
    ) -> None:
        """``cluster_args`` go to the runner itself (``--restart always``), ``serve_args`` to
        every replica."""
        self.state_file = state_file
        self.log_path = log_path
        self._log = log_path.open("wb")
        self._command = (replicas, tuple(serve_args), tuple(cluster_args))
        self._env = dict(env) if env is not None else None
        self._starts = 0
        self.state: dict[str, Any] = {}
        self._start()

    def _start(self) -> None:
        """Starts the runner on two free ports. A free port is only free when it was asked:
        until HAProxy binds it, any process's outgoing connection may take it as its own
        ephemeral port (on a busy machine, now and then), so a start that lost its port is
        tried again on others (see :meth:`read_state`)."""
        replicas, serve_args, cluster_args = self._command
        self._starts += 1
        self.grpc_port, self.http_port = free_port(), free_port()
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "omni_cli.cluster", "--replicas", str(replicas)),
                *("--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port)),
                *("--state-file", str(self.state_file), *cluster_args, "--", *serve_args),
            ],
            cwd=ROOT,
            env=self._env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def read_state(self) -> bool:
        """Whether the cluster is up (its state, read, is in :attr:`state`); raises
        RuntimeError if the runner has ended without writing it (after starting it again on
        other ports, up to ``PORT_TRIES`` times, when it ended for want of its port)."""
        if not self.state_file.exists():
            if self.process.poll() is not None:
                self._log.flush()
                lost_port = PORT_TAKEN in self.log_path.read_bytes()
                if lost_port and self._starts < PORT_TRIES:
                    self._start()
                    return False
                raise RuntimeError(f"the cluster ended before it started; see {self.log_path}")
            return False
        self.state = json.loads(self.state_file.read_text())
        return True

    def stop(self) -> None:
        """Stops the cluster as SIGTERM does for an operator, killing it if it hangs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


__all__ = ["ROOT", "ClusterChild"]
