"""The OpenAI-Realtime websocket bridge: browsers and stock Realtime clients reach the service.

The bridge is a gRPC client of the duplex service (browser → bridge → gRPC → engine), built on
the client package's channel and status reading, and keeps no session state beyond what one
websocket needs, so any bridge process can carry a session that another one started.

* :mod:`bridge.app`: the aiohttp application and :func:`bridge.app.start_bridge`;
* :mod:`bridge.relay`: one websocket ⇄ one ``Converse`` stream, with its explicit state;
* inbound, client JSON → contract: :mod:`bridge.inbound` (frames to commands),
  :mod:`bridge.inbound_events` (the client events' schema), :mod:`bridge.inbound_session`
  (``session.update`` to a session config), :mod:`bridge.errors` (refusals);
* outbound, contract → client JSON: :mod:`bridge.outbound` (a session's event stream),
  :mod:`bridge.outbound_events` (events that render alone), :mod:`bridge.outbound_session`
  (sessions and capabilities).

The translation modules are pure: no sockets, no clock.
"""
