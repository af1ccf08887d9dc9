"""The contract's enum values under the names the Realtime JSON protocols give them.

OpenAI's Realtime API and vLLM-Omni's duplex protocol (built on it) spell these values the same
way. The bridge writes and reads them in both of its dialects, and the vllm-omni engine reads
them in vLLM-Omni's events, so the tables live here, once, where both may import them. Each maps
a name to its value; a reader that renders turns one around (``{v: k for k, v in ...}``).
"""

from __future__ import annotations

from omni_grpc.wire.pb import pb

OVERLAP_POLICIES: dict[str, pb.OverlapPolicy.ValueType] = {
    "listen_only": pb.OVERLAP_POLICY_LISTEN_ONLY,
    "barge_in_on_speech": pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH,
}
OVERLAP_ACTIONS: dict[str, pb.OverlapAction.ValueType] = {
    "drop": pb.OVERLAP_ACTION_DROP,
    "listen": pb.OVERLAP_ACTION_LISTEN,
    "barge_in": pb.OVERLAP_ACTION_BARGE_IN,
    "pause": pb.OVERLAP_ACTION_PAUSE,
    "resume": pb.OVERLAP_ACTION_RESUME,
}
RESPONSE_STATUSES: dict[str, pb.ResponseStatus.ValueType] = {
    "in_progress": pb.RESPONSE_STATUS_IN_PROGRESS,
    "completed": pb.RESPONSE_STATUS_COMPLETED,
    "cancelled": pb.RESPONSE_STATUS_CANCELLED,
    "failed": pb.RESPONSE_STATUS_FAILED,
    "incomplete": pb.RESPONSE_STATUS_INCOMPLETE,
}
ITEM_STATUSES: dict[str, pb.ItemStatus.ValueType] = {
    "in_progress": pb.ITEM_STATUS_IN_PROGRESS,
    "completed": pb.ITEM_STATUS_COMPLETED,
    "incomplete": pb.ITEM_STATUS_INCOMPLETE,
}
# The status_reason of a response that failed because the conversation does not fit the
# model's context under disabled truncation (Response.status_reason).
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"

__all__ = [
    "CONTEXT_LENGTH_EXCEEDED",
    "ITEM_STATUSES",
    "OVERLAP_ACTIONS",
    "OVERLAP_POLICIES",
    "RESPONSE_STATUSES",
]
