"""The websocket bridge: browsers and stock Realtime clients reach the service.

The bridge is a gRPC client of the duplex service (browser → bridge → gRPC → engine), built on
the client package's channel and status reading, and keeps no session state beyond what one
websocket needs, so any bridge process can carry a session that another one started.

It speaks two JSON dialects of the one contract, each a package of its own:

* :mod:`bridge.realtime`: OpenAI's Realtime API (GA names, beta spellings accepted), with our
  duplex extensions for a client that asks for them, on ``/v1/realtime``;
* :mod:`bridge.vllm_omni`: vLLM-Omni's dialect, on ``/v1/duplex`` and ``?duplex=1`` (the
  reference's wire names), built on OpenAI's with the reference's differences.

The rest is shared and names no dialect: :mod:`bridge.app` (the aiohttp application and
:func:`bridge.app.start_bridge`), :mod:`bridge.options` (every setting, in one value),
:mod:`bridge.relay` (one websocket ⇄ one ``Converse`` stream, with its explicit state),
:mod:`bridge.gate` (what a request must show), :mod:`bridge.client_secrets` and
:mod:`bridge.minting` (short-lived secrets for pages), :mod:`bridge.transport` (the seam to the
service), :mod:`bridge.errors`, :mod:`bridge.metrics` and :mod:`bridge.tracing`.
:mod:`bridge.dialects` is the one place that chooses a connection's dialect.

The translation modules are pure: no sockets, no clock.
"""
