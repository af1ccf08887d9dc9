"""OpenAI's Realtime dialect: the JSON events of OpenAI's Realtime API, both ways.

Stock OpenAI clients (the SDKs, the agents SDKs, browsers) connect on ``/v1/realtime`` and get
OpenAI's GA events only; a client that asks for our duplex extensions (``?extensions=1``, or a
``session.resume``) also gets the contract's events and fields that OpenAI lacks.

* inbound, client JSON → contract: :mod:`~bridge.realtime.inbound` (frames to commands),
  :mod:`~bridge.realtime.client_events` (the client events' schema),
  :mod:`~bridge.realtime.session_config` (``session.update`` to a session config),
  :mod:`~bridge.realtime.fast_append` (the audio hot path), :mod:`~bridge.realtime.unhonoured`
  (GA fields refused because the service cannot honour them);
* outbound, contract → client JSON: :mod:`~bridge.realtime.outbound` (a session's event
  stream), :mod:`~bridge.realtime.server_events` (events that render alone),
  :mod:`~bridge.realtime.session_json` (sessions and capabilities),
  :mod:`~bridge.realtime.plain` (what a client without the extensions gets);
* function tools, both ways: :mod:`~bridge.realtime.tools` and
  :mod:`~bridge.realtime.tool_models`.
"""
