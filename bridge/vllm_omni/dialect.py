"""vLLM-Omni's dialect of one connection, as its relay sees it (:class:`bridge.dialect.Dialect`):
OpenAI's pair of halves (:class:`bridge.realtime.dialect.RealtimeDialect`), with vLLM-Omni's own
inbound and outbound halves in place of OpenAI's."""

from __future__ import annotations

from bridge.realtime.dialect import RealtimeDialect
from bridge.vllm_omni.inbound import VllmOmniInbound
from bridge.vllm_omni.outbound import VllmOmniOutbound


def vllm_omni_dialect(*, max_audio_delta_bytes: int) -> RealtimeDialect:
    """vLLM-Omni's dialect for one connection (its extensions are always on)."""
    outbound = VllmOmniOutbound(max_audio_delta_bytes=max_audio_delta_bytes)
    # The inbound half asks the outbound one which item ids the engine named, and tells it
    # whether the session opened with a session.update.
    return RealtimeDialect(VllmOmniInbound(outbound), outbound)
