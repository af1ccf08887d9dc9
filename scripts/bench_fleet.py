#!/usr/bin/env python3
"""Benchmark: the fleet under fire, every fault at once, and whether anything was lost.

    scripts/bench_fleet.py                       # 60 sessions, 3 turns, 4 cuts each, a kill / 15 s
    scripts/bench_fleet.py --sessions 500 --cuts 20 --kill-every-s 15
    scripts/bench_fleet.py --json                # every figure as one JSON document on stdout

``scripts/cluster``'s runner (Redis, three loopback replicas with ``--durability sync``, HAProxy,
``--restart always``) and N sessions of the Python resuming client
(:class:`omni_grpc.client.DuplexClient`), each through a TCP proxy of its own in front of HAProxy
(``tests/client/proxy.py``'s :class:`ChaosProxy`, so that its connection can be dropped). Each
session says several spoken turns: 2 s of audio in 100 ms appends at real-time pace, a commit,
then the answer read (the client acknowledges what it read); the loopback engine answers a turn
with that turn's own audio, so an answer is exactly as long as the audio it was given. All at
once:

* **client cuts**, at random moments of each session, mid-audio or mid-answer: a clean close of
  the client's stream (it cancels the call, the connection stays) or a dropped TCP connection
  (the proxy resets both sides); the client resumes either way;
* **a replica killed** (SIGKILL) every K seconds, the one chosen at random among those up; the
  runner starts it again on its route, and its sessions go on on a peer or on it.

Checked per session, once every session has said its turns and closed: the events contiguous
(none lost, none out of order) and none doubled; every turn ended (a ``response_done`` for
each); the committed audio whole (each ``input_committed`` says 2,000 ms, and each answer that
completed is 2,000 ms of audio: one cut by a kill ends ``session_moved`` and is counted apart);
every command applied once (one commit and one response per turn, no error event); and the
session alive to the end. Printed: sessions, turns, events, cuts by kind and moment, kills,
resumes, problems by kind, time, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omni_cli.cluster import proxy_status  # noqa: E402
from omni_cli.cluster_child import ClusterChild  # noqa: E402
from omni_grpc.bench import harness  # noqa: E402
from omni_grpc.client import ClientOptions, DuplexClient, ReconnectPolicy  # noqa: E402
from omni_grpc.wire import pb  # noqa: E402
from tests.client.proxy import ChaosProxy  # noqa: E402

INPUT_RATE_HZ = 16_000
APPEND_MS = 100
TURN_MS = 2_000
# A client that rides out a replica's death: the owner's lease lapses (3 s) before a peer may
# adopt, and the restarted replica takes seconds to start on a loaded machine.
PATIENT = ReconnectPolicy(
    initial_backoff_s=0.05, max_backoff_s=0.5, max_attempts=100_000, max_elapsed_s=120.0
)
OPTIONS = ClientOptions(reconnect=PATIENT, open_retry=PATIENT, ack_every_events=8)
TURN_TIMEOUT_S = 120.0
START_TIMEOUT_S = 180.0
# Long enough for a session whose client waits out a kill and a restart.
LIMITS = """[limits]
disconnect_grace_s = 120.0
key_opens_per_s = 10000.0
key_resumes_per_s = 10000.0
"""


def tone(ms: int) -> bytes:
    """``ms`` of a quiet tone, pcm16 at 16 kHz (what is said does not matter, only how long)."""
    t = np.arange(INPUT_RATE_HZ * ms // 1000, dtype=np.float32) / INPUT_RATE_HZ
    return (3000 * np.sin(2 * np.pi * 220.0 * t)).astype("<i2").tobytes()


CHUNK = tone(APPEND_MS)


@dataclass
class Settings:
    sessions: int = 60
    turns: int = 3
    cuts: int = 4  # per session, at random moments while it talks or listens
    kill_every_s: float = 15.0  # 0: no kills
    replicas: int = 3
    ramp_s: float = 5.0  # sessions open spread over this long
    seed: int = 1


@dataclass
class Report:
    sessions: int = 0
    turns: int = 0
    events: int = 0
    cuts: Counter[str] = field(default_factory=Counter)  # "close mid-audio", ...
    kills: int = 0
    restarts: int = 0
    resumes: int = 0
    moved_answers: int = 0  # answers cut by a kill (session_moved)
    on_killed: int = 0  # sessions whose replica was killed under them
    with_problems: int = 0  # sessions with a problem
    with_problems_unkilled: int = 0  # of those, the ones whose replica was never killed
    problems: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


class FleetSession:
    """One client: its turns, its cuts, everything it was told, and the checks."""

    def __init__(self, index: int, upstream_port: int, settings: Settings) -> None:
        self.index = index
        self.settings = settings
        self.rng = random.Random(settings.seed * 100_003 + index)
        self.proxy = ChaosProxy("127.0.0.1", upstream_port, seed=self.rng.randrange(1 << 30))
        self.client: DuplexClient | None = None
        self.events: list[pb.ConverseResponse] = []
        self.phase = "opening"  # then "audio", "answer", "done"
        self.cuts: Counter[str] = Counter()
        self.error: BaseException | None = None
        self.started_at = 0.0  # when it opened (its cuts are drawn from there)
        self.kills = 0  # how many times its replica was killed under it
        self.problems: Counter[str] = Counter()
        # What happened when (seconds from its opening), for --details: cuts, kills, commits.
        self.timeline: list[tuple[float, str]] = []
        self._changed = asyncio.Event()

    def note(self, what: str) -> None:
        self.timeline.append((round(time.monotonic() - self.started_at, 3), what))

    async def run(self) -> None:
        await asyncio.sleep(self.rng.uniform(0, self.settings.ramp_s))
        await self.proxy.start()
        self.started_at = time.monotonic()
        reader = cutter = None
        try:
            self.client = await DuplexClient.connect(self.proxy.target, options=OPTIONS)
            reader = asyncio.create_task(self._read(self.client))
            cutter = asyncio.create_task(self._cut_at_random())
            for turn in range(1, self.settings.turns + 1):
                await self._speak()
                self.phase = "answer"
                refused = len(self.of_kind("error"))
                self.note(f"commit as command {self.client._journal.next_seq}")
                await self.client.commit(create_response=True)
                # A commit refused (an error event) is never answered: the turn is over,
                # unfinished, and the check counts it.
                await self._until(functools.partial(self._answered, turn, refused))
            self.phase = "done"
            cutter.cancel()
            await self.client.close()
        except Exception as error:  # counted as a problem of this session
            self.error = self.error or error
        finally:
            self.phase = "done"
            for task in (cutter, reader):
                if task is not None:
                    task.cancel()
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.client.close(timeout_s=1.0)
            await self.proxy.stop()

    def killed(self, route: str) -> None:
        """The replica of ``route`` was killed: counted if this session was on it."""
        if self.client is not None and self.phase != "done" and self.client._conn.route == route:
            self.kills += 1
            self.note(f"its replica {route} killed")

    async def _speak(self) -> None:
        """2 s of audio in 100 ms appends, each sent when its audio would have been spoken."""
        assert self.client is not None
        self.phase = "audio"
        started = time.monotonic()
        for k in range(TURN_MS // APPEND_MS):
            await self.client.append_audio(
                CHUNK, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=INPUT_RATE_HZ
            )
            await asyncio.sleep(max(0.0, started + (k + 1) * APPEND_MS / 1000 - time.monotonic()))

    async def _read(self, client: DuplexClient) -> None:
        try:
            async for event in client.events():
                self.events.append(event)
                self.note(f"event {event.seq} {event.WhichOneof('event')}")
                self._changed.set()
        except Exception as error:
            self.error = self.error or error
            self._changed.set()

    async def _until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while not done():
                if self.error is not None:
                    raise self.error
                self._changed.clear()
                await self._changed.wait()

    async def _cut_at_random(self) -> None:
        """The session's cuts, at moments drawn over how long its turns take (about 4 s each:
        2 s of audio, 2 s of answer); those that fall after its end do not happen."""
        span = self.settings.turns * 2 * TURN_MS / 1000
        for at in sorted(self.rng.uniform(0.2, span) for _ in range(self.settings.cuts)):
            await asyncio.sleep(max(0.0, at - (time.monotonic() - self.started_at)))
            if self.phase not in ("audio", "answer") or self.client is None:
                continue
            moment = "mid-audio" if self.phase == "audio" else "mid-answer"
            if self.rng.random() < 0.5:
                stream = self.client._current  # the call the client reads now
                if stream is None:
                    continue
                stream.cancel()  # a clean end of the call: RST_STREAM, the connection stays
                self.cuts[f"stream closed {moment}"] += 1
                self.note(f"stream closed {moment}")
            elif self.proxy.cut_all():
                self.cuts[f"TCP dropped {moment}"] += 1
                self.note(f"TCP dropped {moment}")

    def _answered(self, turns: int, errors: int) -> bool:
        done = len(self.of_kind("response_done")) >= turns
        return done or len(self.of_kind("error")) > errors

    def of_kind(self, kind: str) -> list[pb.ConverseResponse]:
        return [e for e in self.events if e.WhichOneof("event") == kind]

    def check(self, report: Report) -> None:
        """Adds this session's figures and problems to ``report``."""
        mine: Counter[str] = Counter()
        self._check(report, mine)
        report.problems.update(mine)
        self.problems = +mine
        report.on_killed += self.kills > 0
        if +mine:
            report.with_problems += 1
            report.with_problems_unkilled += self.kills == 0

    def _check(self, report: Report, problems: Counter[str]) -> None:
        turns = self.settings.turns
        seqs = [e.seq for e in self.events if e.seq]
        report.events += len(seqs)
        report.turns += len(self.of_kind("response_done"))
        report.cuts.update(self.cuts)
        if self.client is not None:
            report.resumes += self.client.stats.reconnects
            problems["doubled events"] += self.client.stats.duplicate_events
        problems["doubled events"] += len(seqs) - len(set(seqs))
        if seqs:
            problems["lost events"] += len(set(range(1, max(seqs) + 1)) - set(seqs))
        problems["reordered events"] += sum(a > b for a, b in itertools.pairwise(seqs))
        if self.error is not None:
            problems[f"session failed ({type(self.error).__name__})"] += 1
        problems["unfinished turns"] += max(0, turns - len(self.of_kind("response_done")))
        committed = [e.input_committed.audio_duration_ms for e in self.of_kind("input_committed")]
        problems["commits applied twice"] += max(0, len(committed) - turns)
        problems["commits not applied"] += max(0, turns - len(committed))
        problems["committed audio not whole"] += sum(abs(ms - TURN_MS) > 1 for ms in committed)
        problems["responses doubled"] += max(0, len(self.of_kind("response_created")) - turns)
        for event in self.of_kind("error"):
            problems[f"error {event.error.code}"] += 1
        self._check_answers(report, problems)

    def _check_answers(self, report: Report, problems: Counter[str]) -> None:
        """A completed answer is the committed audio played back: 2,000 ms of it."""
        audio: Counter[str] = Counter()
        for event in self.of_kind("output_audio_delta"):
            audio[event.output_audio_delta.response_id] += len(event.output_audio_delta.audio)
        rate = self._output_rate()
        for event in self.of_kind("response_done"):
            response = event.response_done.response
            if response.status == pb.RESPONSE_STATUS_COMPLETED:
                ms = audio[response.id] / 2 / rate * 1000
                problems["answers not whole"] += abs(ms - TURN_MS) > APPEND_MS / 2
            elif response.status_reason == "session_moved":
                report.moved_answers += 1
            else:
                problems[f"answers ended {response.status_reason or 'oddly'}"] += 1

    def _output_rate(self) -> int:
        for event in self.events:
            if event.HasField("session_created"):
                fmt = event.session_created.session.config.output_audio_format
                if fmt.sample_rate_hz:
                    return int(fmt.sample_rate_hz)
        return 24_000


class ClientLog(logging.Handler):
    """Puts each client log record that names a session into that session's timeline."""

    def __init__(self, sessions: list[FleetSession]) -> None:
        super().__init__(logging.INFO)
        self.sessions = sessions

    def emit(self, record: logging.LogRecord) -> None:
        session_id = getattr(record, "session_id", None)
        for session in self.sessions:
            if session.client is not None and session.client.session_id == session_id:
                session.note(f"client: {record.getMessage()}")


async def kill_every(
    cluster: ClusterChild,
    settings: Settings,
    stop: asyncio.Event,
    report: Report,
    sessions: list[FleetSession],
) -> None:
    """SIGKILL to a replica every ``kill_every_s``, one the proxy sees up (so the one killed
    last is back first), chosen at random."""
    rng = random.Random(settings.seed)
    stats_port = urllib.parse.urlsplit(cluster.state["proxy"]["stats"]).port or 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), settings.kill_every_s)
            return
        cluster.read_state()
        status = await asyncio.to_thread(proxy_status, stats_port)
        up = [r for r in cluster.state["replicas"] if status.get(f"replicas/{r['route']}") == "UP"]
        if not up:
            continue
        victim = rng.choice(up)
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim["pid"], signal.SIGKILL)
            report.kills += 1
            for session in sessions:
                session.killed(victim["route"])
            print(f"  killed {victim['route']} (pid {victim['pid']})", file=sys.stderr, flush=True)


def write_details(details: Path, workdir: Path, sessions: list[FleetSession]) -> None:
    """Into ``details``: the cluster's log, and the timeline of each session with a problem
    (its cuts, kills, commits and events, with the client's error if any)."""
    details.mkdir(parents=True, exist_ok=True)
    if (workdir / "cluster.log").exists():
        shutil.copy(workdir / "cluster.log", details / "cluster.log")
    with (details / "problem-sessions.txt").open("w") as out:
        for session in sessions:
            if not session.problems and session.error is None:
                continue
            session_id = session.client.session_id if session.client is not None else "?"
            print(f"## session {session.index} ({session_id}): {dict(session.problems)}", file=out)
            print(f"error: {session.error!r}", file=out)
            for at, what in session.timeline:
                print(f"{at:9.3f} {what}", file=out)
            print(file=out)


async def run_fleet(settings: Settings, workdir: Path, details: Path | None = None) -> Report:
    """Starts the cluster in ``workdir``, runs the fleet through it, stops it; the report
    (and, with ``details``, what :func:`write_details` writes)."""
    config = workdir / "limits.toml"
    config.write_text(LIMITS)
    room = str(max(64, settings.sessions * 2))
    serve = [
        *("--engine", "loopback", "--engine-option", f"capacity={room}"),
        *("--durability", "sync", "--max-sessions", room, "--config", str(config)),
        # With --details the replicas say what they do with each session (the log is kept).
        *("--shutdown-grace-s", "20", "--log-level", "info" if details else "warning"),
    ]
    cluster = ClusterChild(
        settings.replicas,
        serve,
        workdir / "cluster.json",
        workdir / "cluster.log",
        cluster_args=("--restart", "always"),
    )
    report = Report(sessions=settings.sessions)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not cluster.read_state():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not start; see {cluster.log_path}")
            await asyncio.sleep(0.1)
        grpc_port = int(cluster.state["proxy"]["grpc"].rsplit(":", 1)[1])
        sessions = [FleetSession(i, grpc_port, settings) for i in range(settings.sessions)]
        if details is not None:
            client_log = logging.getLogger("omni_grpc.client")
            client_log.setLevel(logging.INFO)
            client_log.addHandler(ClientLog(sessions))
        stop = asyncio.Event()
        killer = (
            asyncio.create_task(kill_every(cluster, settings, stop, report, sessions))
            if settings.kill_every_s > 0
            else None
        )
        started = time.monotonic()
        await asyncio.gather(*(session.run() for session in sessions))
        report.seconds = time.monotonic() - started
        stop.set()
        if killer is not None:
            await killer
        cluster.read_state()
        report.restarts = sum(int(r.get("restarts", 0)) for r in cluster.state["replicas"])
        for session in sessions:
            session.check(report)
    finally:
        cluster.stop()
        if details is not None:
            write_details(details, workdir, locals().get("sessions", []))
    report.problems = +report.problems  # only the kinds that happened
    return report


def rows(report: Report, settings: Settings) -> list[list[str]]:
    cuts = sum(report.cuts.values())
    table = [
        ["sessions", str(report.sessions)],
        ["turns answered / said", f"{report.turns} / {report.sessions * settings.turns}"],
        ["events", str(report.events)],
        ["client cuts", str(cuts)],
        *([f"  {kind}", str(n)] for kind, n in sorted(report.cuts.items())),
        ["replicas killed (SIGKILL) / restarted", f"{report.kills} / {report.restarts}"],
        ["resumes", str(report.resumes)],
        ["sessions whose replica was killed under them", str(report.on_killed)],
        ["answers cut by a kill (session_moved)", str(report.moved_answers)],
        ["problems", str(sum(report.problems.values()))],
        *([f"  {kind}", str(n)] for kind, n in sorted(report.problems.items())),
        [
            "sessions with a problem (of them, never on a killed replica)",
            f"{report.with_problems} ({report.with_problems_unkilled})",
        ],
        ["time", f"{report.seconds:.0f} s"],
    ]
    return table


async def main_async(args: argparse.Namespace) -> int:
    harness.raise_open_file_limit()
    load_before = os.getloadavg()
    settings = Settings(
        sessions=args.sessions,
        turns=args.turns,
        cuts=args.cuts,
        kill_every_s=args.kill_every_s,
        ramp_s=args.ramp_s,
        seed=args.seed,
    )
    print(
        f"{settings.sessions} sessions x {settings.turns} turns, {settings.cuts} cuts each, "
        f"a replica killed every {settings.kill_every_s:g} s",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="omni-fleet-") as tmp:
        report = await run_fleet(settings, Path(tmp), args.details)
    document: dict[str, Any] = {
        "settings": settings.__dict__,
        "report": {**report.__dict__, "cuts": dict(report.cuts), "problems": dict(report.problems)},
    }
    harness.finish_run(
        ["", "figure"], rows(report, settings), load_before, document if args.json else None
    )
    return 1 if report.problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--cuts", type=int, default=4, help="per session")
    parser.add_argument("--kill-every-s", type=float, default=15.0, help="0: no kills")
    parser.add_argument("--ramp-s", type=float, default=5.0, help="the opens spread over this")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help=harness.JSON_HELP)
    parser.add_argument(
        "--details",
        type=Path,
        help="a folder for the cluster's log and each problem session's timeline",
    )
    args = parser.parse_args()
    with harness.progress_to_stderr(args.json):
        return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
