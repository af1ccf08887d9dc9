"""Every error code the service sends: the closed set of ``ErrorReport.code``, with its meanings.

A client in any language branches on these strings, so they are part of the contract: the proto
comment of ``ErrorReport.code`` lists exactly these, and ``tests/test_error_codes.py`` fails when
the two differ or when the code raises a code that is not here. The same codes are the
``ErrorInfo`` metadata ``code`` of a refused stream's gRPC status (``unauthenticated`` is only
that), and the bridge forwards them to websocket clients unchanged.
"""

from __future__ import annotations

ERROR_CODES: dict[str, str] = {
    # -- the command itself ---------------------------------------------------------------
    "bad_event": "the command is malformed or not allowed here",
    "invalid_message": "the bytes are not a ConverseRequest",
    "event_too_large": "the command is over Capabilities.max_message_bytes",
    "client_seq_gap": "client_seq skipped ahead of the next number; nothing was applied",
    "missing_item_id": "the command needs an item_id",
    "bad_audio": "the audio is not a whole number of samples, or not audio",
    "invalid_video_frames": "too many video frames, or one that is not JPEG or PNG",
    "invalid_event_ack": "ack_events acknowledged a seq the server never sent",
    # -- the stream's first message and resume -------------------------------------------
    "bad_first_message": "the stream began with something other than open or resume",
    "config_timeout": "no first message arrived in time",
    "session_already_open": "open_session on a stream that already has a session",
    "unsupported_session_resume": "resume_session on a stream that already has a session",
    "invalid_session_resume": "resume_session without a session_id or a resume_token",
    "session_resume_expired": "the session to resume is unknown, ended, or the token is wrong",
    "session_resume_conflict": "the resume cursor is ahead of the newest event",
    "session_not_found": "GetSession: unknown session, or a wrong or missing token",
    "unauthenticated": "no valid API key (a gRPC status only, never an event)",
    # -- the configuration -----------------------------------------------------------------
    "invalid_session_config": "a configuration value is out of range or unknown",
    "unsupported_audio_format": "an encoding or sample rate this server does not take",
    "unsupported_turn_detection": "a turn detection this engine lacks, or a bad threshold",
    "unsupported_interruption": "interruption settings this engine cannot honour",
    "unsupported_truncation": "a truncation other than auto, of an engine that honours it alone",
    "barge_in_unsupported": "barge-in asked of an engine that cannot barge in",
    "model_update_unsupported": "update_session tried to change the model",
    "unsupported_noise_reduction": "a noise reduction type this engine does not run",
    "unsupported_content": "a conversation item's content this engine cannot take",
    "unknown_transcription_model": "a transcription model the engine does not have",
    "unsupported_transcription_logprobs": "transcript logprobs asked of an engine without them",
    "responses_unsupported": "a response asked of a transcription session",
    # -- conversation and responses --------------------------------------------------------
    "input_audio_buffer_empty": "commit with no input audio buffered",
    "item_not_found": "no conversation item with that id",
    "response_already_active": "create_response while a response is running",
    "response_create_without_input": "create_response with nothing committed since the last",
    "response_not_active": "no running response (with that id) to cancel or clear",
    "out_of_band_unsupported": "an out-of-band response or own input on an engine without them",
    "playback_item_not_found": "ack_playback names no known response",
    "playback_item_mismatch": "ack_playback names an item that is not its response's",
    # -- limits (type RATE_LIMIT; retryable) -----------------------------------------------
    "input_backpressure": "too much uncommitted input audio: commit, clear, or retry later",
    "rate_limit_exceeded": "too many commands or audio bytes: retry after retry_after",
    "resource_exhausted": "the server holds max_sessions: retry after retry_after",
    "queue_full": "the server is at capacity and its queue is full: retry after retry_after",
    "queue_wait_exceeded": "a queued session waited its longest: retry after retry_after",
    "slow_consumer": "the stream read too slowly and was cut: resume",
    # -- the server and its engine (type SERVER) -------------------------------------------
    "server_shutting_down": "the server is draining: resume or open elsewhere",
    "session_elsewhere": "the session lives on another replica: retry (with x-omni-route)",
    "session_store_unavailable": "a resume needs the session store (Redis), which is away: retry",
    "engine_error": "the engine failed to open the session or to serve a command",
    "internal_error": "a response failed inside the server",
    "model_request_failed": "the model could not serve the response's request (vllm)",
    "prompt_template_failed": "the model's chat template refused the prompt (vllm)",
    "speech_synthesis_failed": "the answer could not be spoken (vllm)",
    "transcription_failed": "a user turn could not be transcribed (input_transcription_failed)",
}


def known_code(code: str, fallback: str = "engine_error") -> str:
    """``code`` when it is in the closed set, else ``fallback``: for codes that come from
    outside (an engine's own protocol), so that no foreign string reaches a client."""
    return code if code in ERROR_CODES else fallback
