"""One method per command of the protocol, each numbered by the client when it is sent.

:class:`Commands` only builds requests; :meth:`Commands._submit` (the client) numbers them,
keeps them until the server confirms them, and writes them. Every method returns the
``client_seq`` it was given, which is what ``error`` events about it carry.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from omni_grpc.wire import pb

_HANDSHAKES = frozenset({"open_session", "resume_session"})


class Commands(abc.ABC):
    """The commands of an open session."""

    @abc.abstractmethod
    async def _submit(self, request: pb.ConverseRequest) -> int:
        """Numbers, keeps and writes ``request``; returns its client_seq."""

    async def send(self, request: pb.ConverseRequest, *, event_id: str = "") -> int:
        """Sends any command (a copy of ``request``, numbered here); returns its client_seq."""
        kind = request.WhichOneof("command")
        if kind is None:
            raise ValueError("the request carries no command")
        if kind in _HANDSHAKES:
            raise ValueError(f"{kind} is the client's own business; it cannot be sent")
        owned = pb.ConverseRequest()
        owned.CopyFrom(request)
        owned.client_seq = 0
        if event_id:
            owned.event_id = event_id
        return await self._submit(owned)

    async def append_audio(
        self,
        audio: bytes,
        *,
        encoding: pb.AudioEncoding.ValueType = pb.AUDIO_ENCODING_UNSPECIFIED,
        sample_rate_hz: int = 0,
        audio_end_ms: float | None = None,
        video_frames: Sequence[pb.VideoFrame] = (),
    ) -> int:
        """Adds audio (mono; the session's input format unless given) to the input buffer."""
        append = pb.AppendInputAudio(
            audio=audio, encoding=encoding, sample_rate_hz=sample_rate_hz, video_frames=video_frames
        )
        if audio_end_ms is not None:
            append.audio_end_ms = audio_end_ms
        return await self._submit(pb.ConverseRequest(append_input_audio=append))

    async def append_text(self, text: str) -> int:
        """Adds text input to the conversation."""
        return await self._submit(
            pb.ConverseRequest(append_input_text=pb.AppendInputText(text=text))
        )

    async def commit(self, *, create_response: bool | None = None) -> int:
        """Seals the input buffer into a user turn; answers at once if ``create_response``."""
        commit = pb.CommitInputAudio()
        if create_response is not None:
            commit.create_response = create_response
        return await self._submit(pb.ConverseRequest(commit_input_audio=commit))

    async def clear_input(self) -> int:
        """Drops the input buffer."""
        return await self._submit(pb.ConverseRequest(clear_input_audio=pb.ClearInputAudio()))

    async def clear_output(self, response_id: str = "") -> int:
        """Stops the output audio of a response (the active one when not named)."""
        return await self._submit(
            pb.ConverseRequest(clear_output_audio=pb.ClearOutputAudio(response_id=response_id))
        )

    async def create_response(
        self,
        *,
        output_modalities: Sequence[pb.Modality.ValueType] = (),
        instructions: str | None = None,
        metadata: Mapping[str, str] | None = None,
        out_of_band: bool = False,
        input: Sequence[pb.ConversationItem | str] | None = None,
        max_output_tokens: int | None = None,
        voice: str | None = None,
    ) -> int:
        """Asks the engine to answer, optionally overriding modalities and instructions;
        ``metadata`` comes back in the response's ``metadata``.

        ``out_of_band``: the response's output joins no conversation, and it runs beside the
        running response (``Capabilities.supports_out_of_band_responses``). ``input``: what it
        reads instead of the conversation, items and (as strings) the ids of items of the
        conversation; empty: nothing. ``max_output_tokens`` and ``voice``: its own, in place
        of the session's."""
        create = pb.CreateResponse(output_modalities=output_modalities)
        if instructions is not None:
            create.instructions = instructions
        if metadata:
            create.metadata.update(metadata)
        if out_of_band:
            create.conversation = pb.RESPONSE_CONVERSATION_NONE
        if input is not None:
            create.input.SetInParent()
            for entry in input:
                if isinstance(entry, str):
                    create.input.entries.add(item_reference=entry)
                else:
                    create.input.entries.add(item=entry)
        if max_output_tokens is not None:
            create.max_output_tokens = max_output_tokens
        if voice is not None:
            create.voice = voice
        return await self._submit(pb.ConverseRequest(create_response=create))

    async def cancel_response(self, response_id: str = "") -> int:
        """Cancels a response (the active one when not named)."""
        return await self._submit(
            pb.ConverseRequest(cancel_response=pb.CancelResponse(response_id=response_id))
        )

    async def update_session(self, config: pb.SessionConfig) -> int:
        """Changes the fields of the session configuration that ``config`` sets."""
        return await self._submit(
            pb.ConverseRequest(update_session=pb.UpdateSession(config=config))
        )

    async def create_item(self, item: pb.ConversationItem, *, previous_item_id: str = "") -> int:
        """Adds an item to the conversation (at the end unless placed after another)."""
        return await self._submit(
            pb.ConverseRequest(
                create_conversation_item=pb.CreateConversationItem(
                    item=item, previous_item_id=previous_item_id
                )
            )
        )

    async def retrieve_item(self, item_id: str) -> int:
        """Asks for an item; it comes back as ``item_retrieved``."""
        return await self._submit(
            pb.ConverseRequest(
                retrieve_conversation_item=pb.RetrieveConversationItem(item_id=item_id)
            )
        )

    async def delete_item(self, item_id: str) -> int:
        """Removes an item from the conversation."""
        return await self._submit(
            pb.ConverseRequest(delete_conversation_item=pb.DeleteConversationItem(item_id=item_id))
        )

    async def truncate_item(
        self, item_id: str, *, audio_end_ms: float, content_index: int = 0
    ) -> int:
        """Cuts an assistant item's audio (and transcript) at ``audio_end_ms``."""
        return await self._submit(
            pb.ConverseRequest(
                truncate_conversation_item=pb.TruncateConversationItem(
                    item_id=item_id, content_index=content_index, audio_end_ms=audio_end_ms
                )
            )
        )

    async def ack_playback(
        self,
        played_ms: float,
        *,
        committed_ms: float | None = None,
        response_id: str = "",
        item_id: str = "",
        truncate: bool = False,
    ) -> int:
        """Reports how much of a response's audio was played (cumulative milliseconds)."""
        ack = pb.AckPlayback(
            played_ms=played_ms, response_id=response_id, item_id=item_id, truncate=truncate
        )
        if committed_ms is not None:
            ack.committed_ms = committed_ms
        return await self._submit(pb.ConverseRequest(ack_playback=ack))

    async def cancel_input(self) -> int:
        """Drops buffered input and cancels the active response."""
        return await self._submit(pb.ConverseRequest(cancel_input=pb.CancelInput()))

    async def barge_in(self) -> int:
        """Interrupts the assistant at once."""
        return await self._submit(pb.ConverseRequest(barge_in=pb.BargeIn()))

    async def heartbeat(self) -> int:
        """Asks for a ``heartbeat_ack``; numbered, so it survives a reconnect."""
        return await self._submit(pb.ConverseRequest(heartbeat=pb.Heartbeat()))
