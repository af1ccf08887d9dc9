"""A WebRTC call as its relay's carrier: the ``oai-events`` data channel and the two tracks.

The channel carries the same JSON events as a websocket, in the same dialect; what differs is
the audio, which rides the tracks instead, as OpenAI's WebRTC calls have it:

* the caller's audio comes decoded from its track (:func:`bridge.webrtc.media.hear_caller`) as
  ready ``append_input_audio`` commands, which :meth:`CallCarrier.receive` hands the relay
  between the channel's events;
* ``response.output_audio.delta`` events are not sent: their audio is queued on the answer's
  track (:class:`bridge.webrtc.media.AnswerTrack`), and the caller hears
  ``output_audio_buffer.started`` when it starts leaving, ``.stopped`` when the last of it
  has left, and ``.cleared`` when it was cut;
* a barge-in (``input_audio_buffer.speech_started``), a ``response.cancel`` or an
  ``output_audio_buffer.clear`` stops the answer's audio at once, and the session is told
  how much of each cut item left on the track (``ack_playback`` with ``truncate``), so what
  the history keeps is what was heard. An answer played out is acknowledged whole.

The session's audio formats are the call's (pcm16 at 24 kHz, which the tracks convert to and
from Opus): a ``session.update`` that names others has them replaced, as OpenAI ignores them
on a call. A call that named no model (``?model=``, or its form's session) has the service's
default, and the ``model`` of a ``session.update`` (the stock SDK names one) is dropped rather
than refused as a change. Events sent before the channel opens wait for it; a refusal sent
then is kept for the HTTP answer (:attr:`CallCarrier.refusal`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import WSMessage, WSMsgType
from aiortc import RTCDataChannel

from bridge.carrier import Inbound
from bridge.client_socket import ClientFellBehind
from bridge.dialect import Event
from bridge.webrtc.media import CALL_RATE_HZ, FRAME_MS, MAX_HELD_AUDIO_MS, AnswerTrack
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

_CALL_FORMAT = {"type": "audio/pcm", "rate": CALL_RATE_HZ}
# What the channel may hold unsent before a send waits for it to drain (the send deadline).
_CHANNEL_HIGH_BYTES = 4 * 1024 * 1024
# Client events not yet taken by the relay, at most; a caller past it is not reading its
# answers' pace, and its call ends as a websocket's would for a flood.
MAX_HELD_EVENTS = 1024
# Responses whose audio was cut, remembered so that their late deltas stay unheard.
_CUTS_KEPT = 32
_CLOSE = WSMessage(WSMsgType.CLOSE, None, None)


class CallCarrier:
    """One call's data channel and tracks, as a :class:`bridge.carrier.Carrier`."""

    def __init__(
        self, deadline_s: float, on_close: Callable[[], None], *, model_named: bool = True
    ) -> None:
        self._deadline_s = deadline_s
        self._on_close = on_close  # ends the peer connection (bridge.webrtc.calls)
        # Whether the call named its model (?model=, the form's session): if not, its session
        # opened with the service's default before any event, and the model a client's
        # session.update names (the stock SDK names one in its first) is not a change asked for.
        self._model_named = model_named
        self.track = AnswerTrack(self)
        # The channel's events and the track's appends, in the order they came.
        self._inbound: deque[Inbound] = deque()
        self._held_audio = 0  # appends among them
        self._held_events = 0  # channel events among them
        self._ready = asyncio.Event()  # something waits in either queue, or the call ended
        self._channel: RTCDataChannel | None = None
        self._early: list[str] = []  # events sent before the channel opened
        self._closed = False
        self._cut: deque[str] = deque(maxlen=_CUTS_KEPT)
        self.dropped_audio_ms = 0  # caller audio dropped because the relay had not taken it
        # The first error told before the channel opened: the HTTP answer of a refused call.
        self.refusal: Event | None = None
        # Journal events a resume replays, still to come: their audio was made for the call
        # before, so it is not played again on this one.
        self._replay_left = 0
        self._on_ended: list[Callable[[], object]] = []

    # -- the peer connection's side ------------------------------------------------------

    def attach(self, channel: RTCDataChannel) -> None:
        """Carries events on ``channel`` (open, or opening); a second channel is ignored."""
        if self._channel is not None:
            return
        self._channel = channel
        channel.bufferedAmountLowThreshold = _CHANNEL_HIGH_BYTES // 2
        channel.on("message", self._client_message)
        channel.on("close", self.ended)
        if channel.readyState == "open":
            self._flush()
        else:
            channel.on("open", self._flush)

    def as_if_sent(self, event: Event) -> None:
        """Queues an event as if the caller had sent it (a resume, a form's session)."""
        self._held_events += 1
        self._inbound.append(WSMessage(WSMsgType.TEXT, orjson.dumps(event).decode(), None))
        self._ready.set()

    def when_ended(self, callback: Callable[[], object]) -> None:
        """Calls ``callback`` once the call ends."""
        self._on_ended.append(callback)

    def hand_on(self, request: pb.ConverseRequest) -> None:
        """Queues a command from the caller's track; past the bound, the new audio is dropped
        (media waits for no one: the relay is that far behind)."""
        if self._closed:
            return
        if self._held_audio >= MAX_HELD_AUDIO_MS // FRAME_MS:
            self.dropped_audio_ms += FRAME_MS
            return
        self._held_audio += 1
        self._inbound.append(request)
        self._ready.set()

    def ended(self) -> None:
        """The call is gone (its channel closed, or its peer connection failed)."""
        if not self._closed:
            self._closed = True
            self.track.stop()
            self._ready.set()
            callbacks, self._on_ended = self._on_ended, []
            for callback in callbacks:
                callback()

    @property
    def channel_open(self) -> bool:
        return self._channel is not None and self._channel.readyState == "open"

    def _flush(self) -> None:
        early, self._early = self._early, []
        for text in early:
            self._put_out(text)

    def _client_message(self, message: str | bytes) -> None:
        if self._closed:
            return
        if self._held_events >= MAX_HELD_EVENTS:
            logger.info("a call's caller floods its channel; ending the call")
            self.ended()
            return
        if isinstance(message, bytes):
            received = WSMessage(WSMsgType.BINARY, message, None)
        else:
            text = self._as_call(message)
            if text is None:
                return
            received = WSMessage(WSMsgType.TEXT, text, None)
        self._held_events += 1
        self._inbound.append(received)
        self._ready.set()

    def _as_call(self, text: str) -> str | None:
        """The client's event as the relay gets it (None: it is the carrier's own): formats set
        to the call's, and the answer's audio stopped here for a cancel or a clear."""
        try:
            event = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text  # the dialect refuses it, in band
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "output_audio_buffer.clear":
            # The output buffer is the call's, here: clearing it stops the audio and tells the
            # session what was heard; stopping the response is response.cancel's business.
            self._interrupt()
            return None
        if kind == "response.cancel":
            self._interrupt()
        elif kind == "session.update" and isinstance(session := event.get("session"), dict):
            audio = session.get("audio")
            if isinstance(audio, dict):
                for way in ("input", "output"):
                    if isinstance(audio.get(way), dict) and "format" in audio[way]:
                        audio[way]["format"] = dict(_CALL_FORMAT)
            if not self._model_named:
                session.pop("model", None)
            return orjson.dumps(event).decode()
        return text

    # -- the relay's side ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def receive(self) -> Inbound:
        while True:
            if self._inbound:
                message = self._inbound.popleft()
                if isinstance(message, pb.ConverseRequest):
                    self._held_audio -= message.HasField("append_input_audio")
                else:
                    self._held_events -= 1
                return message
            if self._closed:
                return _CLOSE
            self._ready.clear()
            await self._ready.wait()

    async def send(self, event: Event) -> None:
        kind = event.get("type")
        replayed = self._replay_left > 0
        if replayed and "server_event_seq" in event:
            self._replay_left -= 1
        if kind == "session.resumed":
            self._replay_left = int(event.get("replayed_events") or 0)
        if kind == "response.output_audio.delta":
            response_id = event.get("response_id", "")
            if response_id not in self._cut and not replayed:
                pcm = base64.b64decode(event.get("delta", ""))
                self.track.queue(response_id, event.get("item_id", ""), pcm)
            return
        if kind == "output_audio_buffer.cleared" and event.get("response_id") in self._cut:
            return  # the service's answer to a clear: the caller was told when the audio stopped
        if kind == "error" and self.refusal is None and not self.channel_open:
            self.refusal = event
        text = orjson.dumps(event).decode()
        self._put_out(text)
        if kind == "input_audio_buffer.speech_started":
            self._interrupt()  # a barge-in: the caller is heard, not talked over
        elif kind == "response.done":
            response = event.get("response")
            if isinstance(response, dict):
                self.track.answer_complete(str(response.get("id", "")))
        await self._drain()

    async def close(self, code: int, reason: str) -> None:
        # A websocket's close code has no place on a channel: why the session ended was told
        # in an error event before, as on a websocket.
        self.ended()
        self._on_close()

    # -- the answer's audio ----------------------------------------------------------------

    def started(self, response_id: str) -> None:
        self._put_out(_event("output_audio_buffer.started", response_id=response_id))

    def stopped(self, response_id: str, item_id: str, sent_ms: float) -> None:
        self._put_out(_event("output_audio_buffer.stopped", response_id=response_id))
        # Played out whole: the session counts all of it as heard.
        self._hand_on_event(
            pb.ConverseRequest(
                ack_playback=pb.AckPlayback(
                    played_ms=sent_ms, response_id=response_id, item_id=item_id
                )
            )
        )

    def _interrupt(self) -> None:
        """Stops the answer's audio at once, and tells the session how far each cut item got."""
        cuts = self.track.clear()
        for cut in cuts:
            self._cut.append(cut.response_id)
            self._hand_on_event(
                pb.ConverseRequest(
                    ack_playback=pb.AckPlayback(
                        played_ms=cut.sent_ms,
                        response_id=cut.response_id,
                        item_id=cut.item_id,
                        truncate=True,
                    )
                )
            )
        for response_id in dict.fromkeys(cut.response_id for cut in cuts):
            self._put_out(_event("output_audio_buffer.cleared", response_id=response_id))

    def _hand_on_event(self, request: pb.ConverseRequest) -> None:
        """A command of the carrier's own, in order with the channel's events."""
        if not self._closed:
            self._inbound.append(request)
            self._ready.set()

    # -- the channel -------------------------------------------------------------------

    def _put_out(self, text: str | bytes) -> None:
        if isinstance(text, bytes):
            text = text.decode()
        channel = self._channel
        if channel is None or channel.readyState == "connecting":
            self._early.append(text)
        elif channel.readyState == "open":
            channel.send(text)
        # closing or closed: the caller is gone, and the relay hears so from receive()

    async def _drain(self) -> None:
        """Waits, within the send deadline, while the channel holds too much unsent."""
        channel = self._channel
        if channel is None or channel.bufferedAmount <= _CHANNEL_HIGH_BYTES:
            return
        low = asyncio.Event()
        channel.once("bufferedamountlow", low.set)
        try:
            async with asyncio.timeout(self._deadline_s):
                await low.wait()
        except TimeoutError:
            raise ClientFellBehind from None


def _event(kind: str, **fields: Any) -> str:
    # Ids like the dialect's for events never replayed (this carrier's events are not journaled).
    return orjson.dumps(
        {"type": kind, "event_id": f"event_{uuid.uuid4().hex[:24]}", **fields}
    ).decode()


__all__ = ["MAX_HELD_EVENTS", "CallCarrier"]
