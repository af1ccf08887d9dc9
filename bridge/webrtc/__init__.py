"""WebRTC calls on the bridge, as OpenAI's Realtime API takes them (:mod:`bridge.webrtc.calls`).

A call's events ride its ``oai-events`` data channel in the websocket's dialect
(:mod:`bridge.webrtc.carrier`); its audio rides Opus tracks (:mod:`bridge.webrtc.media`); ICE
offers what :mod:`bridge.webrtc.ice` says.
"""
