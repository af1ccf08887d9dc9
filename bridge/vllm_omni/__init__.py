"""vLLM-Omni's dialect: what vLLM-Omni's own serving speaks, so that its clients work unchanged.

It is served on ``/v1/duplex`` and on ``/v1/realtime?duplex=1`` (the URL vLLM-Omni's clients
build). vLLM-Omni's protocol is OpenAI's Realtime events with its own differences, and so is
this package: it builds on :mod:`bridge.realtime` and changes what the reference does
differently (rates, session objects, event shapes, refusals).

* :mod:`~bridge.vllm_omni.client_events`: the client events beyond OpenAI's;
* :mod:`~bridge.vllm_omni.inbound`: frames to commands;
* :mod:`~bridge.vllm_omni.outbound`: contract events to the reference's events.
"""
