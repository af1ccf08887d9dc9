"""A transcription session from the Python client: audio in, transcripts out, no responses.

    settings = Transcription(model="tiny.en", language="en", prompt="Zoë, Anouk")
    async with await DuplexClient.connect(target, transcription=settings) as client:
        await client.append_audio(pcm16)          # server VAD commits each turn
        async for event in client.events():       # input_transcription per turn

The session's other settings come from the ``config`` given to ``connect``; these replace its
type and its transcription settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_grpc.wire import pb


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcription:
    """What a transcription session transcribes with.

    * ``model``: one of the server's ``Capabilities.transcription_models``; empty: its default.
    * ``language``: an ISO-639-1 code; empty: the engine's choice.
    * ``prompt``: words to expect, or a style to follow.
    * ``logprobs``: the log-probabilities of the transcripts' tokens, where the engine has them
      (``Capabilities.supports_transcription_logprobs``).
    """

    model: str = ""
    language: str = ""
    prompt: str = ""
    logprobs: bool = False

    def config(self, base: pb.SessionConfig | None = None) -> pb.SessionConfig:
        """``base`` (or an empty configuration) made a transcription session with these
        settings."""
        config = pb.SessionConfig()
        if base is not None:
            config.CopyFrom(base)
        config.type = pb.SESSION_TYPE_TRANSCRIPTION
        config.input_transcription.CopyFrom(
            pb.InputTranscriptionConfig(
                enabled=True, model=self.model, language=self.language, prompt=self.prompt
            )
        )
        config.transcription_logprobs = self.logprobs
        return config
