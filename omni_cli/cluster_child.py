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
        self.grpc_port, self.http_port = free_port(), free_port()
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "omni_cli.cluster", "--replicas", str(replicas)),
                *("--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port)),
                *("--state-file", str(state_file), *cluster_args, "--", *serve_args),
            ],
            cwd=ROOT,
            env=dict(env) if env is not None else None,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.state: dict[str, Any] = {}

    def read_state(self) -> bool:
        """Whether the cluster is up (its state, read, is in :attr:`state`); raises
        RuntimeError if the runner has ended without writing it."""
        if not self.state_file.exists():
            if self.process.poll() is not None:
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
