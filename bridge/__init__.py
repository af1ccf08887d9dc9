"""The OpenAI-Realtime websocket bridge: browsers and stock Realtime clients reach the service.

The bridge is a gRPC client of the duplex service (browser → bridge → gRPC → engine) and keeps
no session state beyond what one websocket needs, so any bridge process can carry a session
that another one started. :mod:`bridge.dialect` translates between the Realtime JSON dialect
and the Protobuf contract without I/O; :mod:`bridge.app` is the aiohttp application.
"""
