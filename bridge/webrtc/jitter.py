"""A jitter buffer for a call's audio that gives a lost packet up instead of waiting for it.

aiortc's own buffer (``aiortc.jitterbuffer``) releases audio only in sequence: a lost packet
stalls it until sixteen more have come (320 ms), and it then keeps that depth for the rest of
the call (it releases one frame per packet that arrives); every further loss costs more of the
audio around it. Over a real network, where a packet in a hundred is lost, a call's audio would
come to the session late and in holes. :class:`CallJitterBuffer` keeps the same four packets
(80 ms) a late packet may take to arrive, and releases the oldest beyond them, skipping the
place of a packet that has not come by then: the session gets the audio around a hole at once,
the buffer's depth stays 80 ms, and a packet later than that is dropped as aiortc drops any
packet behind its cursor. Video keeps aiortc's behaviour (its frames span packets).

aiortc builds its receivers' buffers by name: :func:`install` puts this one in its place, once
per process (aiortc has no option for it).
"""

from __future__ import annotations

import aiortc.rtcrtpreceiver
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.utils import uint16_add


class CallJitterBuffer(JitterBuffer):
    """aiortc's jitter buffer, which gives a lost audio packet up instead of stalling on it."""

    def _remove_frame(self, sequence_number: int) -> JitterFrame | None:
        if self._is_video or self._origin is None:
            return super()._remove_frame(sequence_number)
        # An Opus packet is a frame. The buffer keeps ``prefetch`` packets (the wait a late
        # packet gets) and releases the oldest beyond them, skipping the places of packets
        # that never came: one packet in, one frame out, so its depth stays put.
        held = sum(packet is not None for packet in self._packets)
        if held <= self._prefetch:
            return None
        while self._packets[self._origin % self._capacity] is None:
            self._origin = uint16_add(self._origin, 1)
        packet = self._packets[self._origin % self._capacity]
        assert packet is not None
        self.remove(1)
        return JitterFrame(data=packet._data, timestamp=packet.timestamp)  # type: ignore[attr-defined]


def install() -> None:
    """Makes every receiver aiortc builds from now on use :class:`CallJitterBuffer`."""
    aiortc.rtcrtpreceiver.JitterBuffer = CallJitterBuffer  # type: ignore[misc]


__all__ = ["CallJitterBuffer", "install"]
