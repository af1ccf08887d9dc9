"""Which command and event kinds (the ``oneof`` fields of the contract) belong together.

Each command kind is in exactly one of the command sets, and each event kind in exactly one of
the event sets; ``tests/test_wire.py`` holds this against the generated descriptors, so a new
field in the contract cannot be forgotten here.
"""

from __future__ import annotations

# The first message of a stream, and only that.
HANDSHAKE_COMMANDS = frozenset({"open_session", "resume_session"})
# About the stream, idempotent, answered by the core: they may come unnumbered (client_seq 0).
UNNUMBERED_COMMANDS = frozenset({"heartbeat", "ack_events"})
# Numbered and answered by the core alone.
CORE_COMMANDS = frozenset({"close_session"})
# Numbered, checked by the core, then applied by the engine.
ENGINE_COMMANDS = frozenset(
    {
        "update_session",
        "append_input_audio",
        "commit_input_audio",
        "clear_input_audio",
        "clear_output_audio",
        "create_response",
        "cancel_response",
        "create_conversation_item",
        "retrieve_conversation_item",
        "delete_conversation_item",
        "truncate_conversation_item",
        "ack_playback",
        "cancel_input",
        "barge_in",
        "append_input_text",
    }
)
COMMAND_SETS = (HANDSHAKE_COMMANDS, UNNUMBERED_COMMANDS, CORE_COMMANDS, ENGINE_COMMANDS)

# About one stream: sent with seq 0, never journaled or replayed.
STREAM_EVENTS = frozenset(
    {
        "session_queued",
        "session_created",
        "session_resumed",
        "session_replaced",
        "resync_required",
        "going_away",
    }
)
# Output of one response, naming it in ``response_id``: taken back on a cancel, and dropped by
# the core once that response is done.
RESPONSE_OUTPUT_EVENTS = frozenset(
    {
        "output_audio_delta",
        "output_audio_transcript_delta",
        "output_text_delta",
        "response_speak",
        "function_call_arguments_delta",
        "function_call_arguments_done",
    }
)
# Everything else in the session's numbered history.
CONVERSATION_EVENTS = frozenset(
    {
        "session_updated",
        "session_expired",
        "session_closed",
        "heartbeat_ack",
        "speech_started",
        "speech_stopped",
        "input_committed",
        "input_cleared",
        "item_added",
        "item_done",
        "item_retrieved",
        "item_deleted",
        "item_truncated",
        "input_transcription",
        "input_transcription_delta",
        "input_transcription_failed",
        "response_created",
        "response_done",
        "response_listen",
        "playback_acknowledged",
        "output_audio_cleared",
        "overlap_decision",
        "turn_end_decision",
        "idle_timeout_triggered",
        "error",
    }
)
EVENT_SETS = (STREAM_EVENTS, RESPONSE_OUTPUT_EVENTS, CONVERSATION_EVENTS)
