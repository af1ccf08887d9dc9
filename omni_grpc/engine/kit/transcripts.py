"""The events that write a user turn down, shared by the engines that transcribe.

A turn's transcript is an ``input_transcription`` (with the log-probabilities of its tokens
when the session asked and the engine has them); a transcription that failed is an
``input_transcription_failed`` with a typed error (``transcription_failed``), never an empty
transcript. Whether a session gets them at all is the core's rule (transcription off drops
them), so engines make them whatever the setting.
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_grpc.wire import pb


def is_transcription_session(config: pb.SessionConfig) -> bool:
    """Whether the session only transcribes (and never responds)."""
    return config.type == pb.SESSION_TYPE_TRANSCRIPTION


def transcript_event(
    item_id: str, text: str, logprobs: Sequence[pb.TranscriptLogprob] = ()
) -> pb.ConverseResponse:
    """The transcript of user item ``item_id``."""
    body = pb.InputTranscription(item_id=item_id, content_index=0, transcript=text)
    body.logprobs.extend(logprobs)
    return pb.ConverseResponse(input_transcription=body)


def transcript_delta(
    item_id: str, delta: str, logprobs: Sequence[pb.TranscriptLogprob] = ()
) -> pb.ConverseResponse:
    """Words of user item ``item_id`` appended to those sent before."""
    body = pb.InputTranscriptionDelta(item_id=item_id, content_index=0, delta=delta)
    body.logprobs.extend(logprobs)
    return pb.ConverseResponse(input_transcription_delta=body)


def transcription_failed(item_id: str, error: BaseException) -> pb.ConverseResponse:
    """Says that user item ``item_id`` could not be transcribed, and why (the exception's
    class and text: a server error, not the client's)."""
    report = pb.ErrorReport(
        code="transcription_failed",
        type=pb.ERROR_TYPE_SERVER,
        message=f"the transcription failed: {type(error).__name__}: {error}"[:500],
    )
    body = pb.InputTranscriptionFailed(item_id=item_id, content_index=0, error=report)
    return pb.ConverseResponse(input_transcription_failed=body)


def word_logprobs(text: str, logprob: float = 0.0) -> list[pb.TranscriptLogprob]:
    """One entry per word of ``text`` (a word after the first with its leading space, as
    Whisper's tokens have it), each at ``logprob``: for an engine whose words are certain."""
    tokens = [word if index == 0 else f" {word}" for index, word in enumerate(text.split())]
    return [
        pb.TranscriptLogprob(token=token, logprob=logprob, bytes=token.encode()) for token in tokens
    ]
