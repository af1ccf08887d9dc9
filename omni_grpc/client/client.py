"""The resuming duplex client: one session, one continuous stream of events, any number of
connections underneath.

A :class:`DuplexClient` opens (or takes over) a session and then keeps it: when a stream breaks
it resumes with the last event seq it received and resends exactly the commands the server has
not applied (see :mod:`omni_grpc.client.link`), so ``events()`` yields each journaled event
once and in order whatever the network did. What cannot be hidden comes out as one of the
typed errors of :mod:`omni_grpc.client.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import replace
from types import TracebackType

from omni_grpc.client.bookkeeping import CommandJournal
from omni_grpc.client.channel import ChannelSettings, Connection
from omni_grpc.client.commands import Commands
from omni_grpc.client.errors import CommandTooLarge, DuplexClientError, SessionClosed
from omni_grpc.client.link import End, SessionLink
from omni_grpc.client.options import ClientOptions, ResumeHandle
from omni_grpc.client.transcription import Transcription
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken

logger = logging.getLogger(__name__)


class DuplexClient(SessionLink, Commands):
    """A session on a duplex server that survives reconnects.

    Build it with :meth:`connect` (a new session) or :meth:`resume` (take one over), keep one
    task consuming :meth:`events` (unread events hold back the stream, bounded by
    ``event_buffer``), and send with the command methods, each of which returns its
    ``client_seq``. A command sent while the connection is down is kept and goes out after the
    resume; only a full journal of unconfirmed commands makes sending wait. While commands wait
    for the server's confirmation the client asks for it with a heartbeat now and then, so
    ``heartbeat_ack`` events may appear unasked.
    """

    def __repr__(self) -> str:
        return (
            f"DuplexClient({self._conn.settings.target}, session={self.session_id or '-'}, "
            f"generation={self.generation}, last_seq={self._cursor.last_seq})"
        )

    # -- construction ----------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        target: str,
        *,
        api_key: str | None = None,
        config: pb.SessionConfig | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        tls_server_name: str | None = None,
        ack_interval_s: float | None = None,
        options: ClientOptions | None = None,
        transcription: Transcription | None = None,
    ) -> DuplexClient:
        """Opens a session on ``target`` ("host:port"); raises OpenRefused or ConnectionLost.

        With ``transcription``, a transcription session (:mod:`.transcription`): ``config``
        made one, with those settings."""
        client = cls._build(
            target, api_key, tls, root_certificates, tls_server_name, ack_interval_s, options
        )
        if transcription is not None:
            config = transcription.config(config)
        try:
            await client._open(config or pb.SessionConfig())
        except BaseException:
            await client._conn.close()
            raise
        return client

    @classmethod
    async def resume(
        cls,
        target: str,
        session_id: str,
        resume_token: str,
        last_seq: int = 0,
        *,
        api_key: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        tls_server_name: str | None = None,
        ack_interval_s: float | None = None,
        options: ClientOptions | None = None,
        route: str = "",
    ) -> DuplexClient:
        """Takes an existing session over (from another process, say) after ``last_seq``;
        ``route`` is the routing key of its replica (``ResumeHandle.route``), when known."""
        client = cls._build(
            target,
            api_key,
            tls,
            root_certificates,
            tls_server_name,
            ack_interval_s,
            options,
            last_seq=last_seq,
        )
        client.session_id = session_id
        client._token = resume_token
        client._conn.route = route
        try:
            await client._take_over()
        except BaseException:
            await client._conn.close()
            raise
        return client

    @classmethod
    def _build(
        cls,
        target: str,
        api_key: str | None,
        tls: bool,
        root_certificates: bytes | None,
        tls_server_name: str | None,
        ack_interval_s: float | None,
        options: ClientOptions | None,
        *,
        last_seq: int = 0,
    ) -> DuplexClient:
        options = options or ClientOptions()
        if ack_interval_s is not None:
            options = replace(options, ack_interval_s=ack_interval_s)
        settings = ChannelSettings(
            target=target,
            api_key=api_key,
            tls=tls,
            root_certificates=root_certificates,
            tls_server_name=tls_server_name,
            initial_reconnect_backoff_s=options.reconnect.initial_backoff_s,
            max_reconnect_backoff_s=options.reconnect.max_backoff_s,
        )
        return cls(Connection(settings), options, last_seq=last_seq)

    async def _open(self, config: pb.SessionConfig) -> None:
        options = self._options
        stream, first = await self._dialer.open(config, options.open_retry, options.on_queued)
        if first.WhichOneof("event") == "session_resumed":
            # Admitted just as its wait's stream was cut: the resume of the wait reattached the
            # session, whose session_created was lost. Taken over like any session.
            stream.cancel()  # unconfirmed: the rotated token and the presented one both work
            self.session_id = first.session_resumed.session.id
            self._token = first.session_resumed.resume_token
            await self._take_over()
            return
        created = first.session_created
        self.session_id = created.session.id
        self._token = created.resume_token
        self.generation = created.attachment_generation
        self.session = created.session
        self.capabilities = created.capabilities
        self._start(stream)
        logger.info(
            "session %s opened on %s",
            self.session_id,
            self._conn.settings.target,
            extra={"session_id": self.session_id},
        )

    async def _take_over(self) -> None:
        stream = await self._resume_stream(opening=True)
        # Limits (message size, grace, ack interval) come with session_created, which a
        # takeover never sees; ask for them instead.
        with contextlib.suppress(StreamBroken):
            self.capabilities = await self._conn.get_capabilities()
        # A new owner has nothing unconfirmed: it numbers on from what the server applied.
        self._journal = CommandJournal(
            max_commands=self._options.max_unconfirmed_commands,
            max_bytes=self._options.max_unconfirmed_bytes,
            next_seq=self.applied_client_seq + 1,
        )
        self._start(stream)
        await self._send_unnumbered(self._receipt())
        logger.info(
            "session %s taken over (generation %d)",
            self.session_id,
            self.generation,
            extra={"session_id": self.session_id},
        )

    # -- public surface --------------------------------------------------------------------

    async def events(self) -> AsyncGenerator[pb.ConverseResponse, None]:
        """Yields every event once, in order, across reconnects; ends after a close this
        client asked for, and raises a :class:`SessionEnded` kind (or ConnectionLost) when the
        session ends otherwise. Only one consumer at a time."""
        while True:
            if self._final is not None and self._events.empty():
                item: pb.ConverseResponse | End = self._final
            else:
                item = await self._events.get()
            if isinstance(item, End):
                with contextlib.suppress(asyncio.QueueFull):
                    self._events.put_nowait(item)  # later calls end the same way
                if item.error is not None:
                    raise item.error
                return
            if item.seq:
                self._delivered_seq = item.seq
                self._since_ack += 1
                if self._since_ack >= self._options.ack_every_events:
                    self._since_ack = 0
                    self._ack_wakeup.set()
            yield item

    @property
    def last_seq(self) -> int:
        """The seq of the last journaled event handed to the caller."""
        return self._delivered_seq

    @property
    def connected(self) -> bool:
        """Says whether commands go straight to a live stream now."""
        return self._stream is not None

    def resume_handle(self) -> ResumeHandle:
        """What another client needs to take this session over after the events seen here."""
        return ResumeHandle(self.session_id, self._token, self._delivered_seq, self._conn.route)

    async def get_session(self) -> pb.GetSessionResponse:
        """Asks the server how it sees the session now (state, last seq, applied client_seq)."""
        try:
            return await self._conn.get_session(self.session_id, self._token)
        except StreamBroken as broken:
            raise DuplexClientError(f"GetSession failed: {broken}") from None

    async def close(self, reason: str = "", *, timeout_s: float = 5.0) -> None:
        """Closes the session for good, waits (bounded) for the server to confirm, and
        releases the connection. Idempotent."""
        if self._final is None and not self._terminal.is_set():
            try:
                await self._submit(
                    pb.ConverseRequest(close_session=pb.CloseSession(reason=reason)), closing=True
                )
                async with asyncio.timeout(timeout_s):
                    await self._terminal.wait()
                    await self._supervisor_done(timeout_s)
            except (DuplexClientError, TimeoutError) as error:
                logger.info(
                    "session %s: close not confirmed (%s)",
                    self.session_id,
                    type(error).__name__,
                    extra={"session_id": self.session_id},
                )
        await self._release(None)

    async def detach(self) -> ResumeHandle:
        """Lets go of the session without closing it, for another client to :meth:`resume`."""
        handle = self.resume_handle()
        if len(self._journal):
            logger.warning(
                "session %s: detaching with %d unconfirmed commands",
                self.session_id,
                len(self._journal),
                extra={"session_id": self.session_id},
            )
        await self._release(
            SessionClosed(
                "the client detached from the session",
                session_id=self.session_id,
                reason="detached",
            )
        )
        return handle

    async def __aenter__(self) -> DuplexClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- sending ---------------------------------------------------------------------------

    async def _submit(self, request: pb.ConverseRequest, *, closing: bool = False) -> int:
        self._check_usable()
        size = request.ByteSize() + 11  # room for the client_seq varint
        limit = self.capabilities.max_message_bytes
        if limit and size > limit:
            raise CommandTooLarge(f"the command has {size} bytes; the server takes {limit}")
        while True:
            async with self._write_lock:
                self._check_usable()
                if self._journal.has_room(size):
                    # Set under the lock: no command is numbered after the close.
                    self._closing = self._closing or closing
                    seq = self._journal.number(request)
                    await self._write_live(request)
                    return seq
                self._room.clear()
            # Full: ask the server what it applied (heartbeat_ack carries it) and wait.
            self._probe = True
            self._ack_wakeup.set()
            await self._room.wait()

    def _check_usable(self) -> None:
        if self._final is not None:
            raise self._final.error or SessionClosed(
                "the session is closed", session_id=self.session_id, reason="client_close"
            )
        if self._closing:
            raise SessionClosed(
                "the session is closing", session_id=self.session_id, reason="client_close"
            )
