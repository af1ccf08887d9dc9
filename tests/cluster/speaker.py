"""One session's client side in the cluster tests: typed turns, and everything it was told."""

from __future__ import annotations

import asyncio

from omni_grpc.client import ClientOptions, DuplexClient, ReconnectPolicy
from omni_grpc.wire import pb

# Patient enough to ride out a replica's death: the owner's lease lapses (3 s) before a peer
# may adopt, and a loaded machine stretches everything.
PATIENT = ReconnectPolicy(
    initial_backoff_s=0.05, max_backoff_s=0.5, max_attempts=1000, max_elapsed_s=90.0
)
OPTIONS = ClientOptions(reconnect=PATIENT, open_retry=PATIENT, ack_every_events=8)
TURN_TIMEOUT_S = 60.0


class Speaker:
    """A client with a reader task that keeps every event it yields."""

    def __init__(self, client: DuplexClient) -> None:
        self.client = client
        self.events: list[pb.ConverseResponse] = []
        self.error: BaseException | None = None
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, target: str) -> Speaker:
        return cls(await DuplexClient.connect(target, options=OPTIONS))

    @property
    def route(self) -> str:
        return self.client._conn.route  # the replica the client's calls are routed to

    async def _read(self) -> None:
        try:
            async for event in self.client.events():
                self.events.append(event)
                self._changed.set()
        except Exception as error:  # kept for the test to report
            self.error = error
            self._changed.set()

    def of_kind(self, kind: str) -> list[pb.ConverseResponse]:
        return [e for e in self.events if e.WhichOneof("event") == kind]

    def responses(self) -> list[pb.Response]:
        return [e.response_done.response for e in self.of_kind("response_done")]

    async def say(self, text: str) -> None:
        await self.client.append_text(text)
        await self.client.create_response()

    async def until(self, predicate: object, what: str) -> None:
        """Waits until ``predicate(self)`` holds (re-checked on every event)."""
        try:
            async with asyncio.timeout(TURN_TIMEOUT_S):
                while not predicate(self):  # type: ignore[operator]
                    assert self.error is None, f"{what}: {self.error!r}"
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            told = [e.WhichOneof("event") for e in self.events]
            raise AssertionError(f"{what}: not in time; told {told}") from None

    async def answered(self, turns: int) -> pb.Response:
        await self.until(lambda s: len(s.responses()) >= turns, f"answer {turns}")
        return self.responses()[turns - 1]

    def seqs(self) -> list[int]:
        return [e.seq for e in self.events if e.seq]

    async def close(self) -> None:
        await self.client.close()
        self._reader.cancel()


def words(response: pb.Response) -> str:
    """What a response said (the transcripts of its output items)."""
    return " ".join(
        part.transcript or part.text for item in response.output for part in item.content
    )
