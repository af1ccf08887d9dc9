"""The two tracks of a recording, on the session's media clock, written as one stereo WAV.

Frame 0 of a part's WAV is the moment its recording started; a frame's place is the server's
monotonic time since then. Left: the user's audio as the engine received it, each append at
the time it arrived, never before the end of the one before (a client that sends faster than
real time is laid end to end), and an append that arrives within :data:`JITTER_S` of the end
of the one before follows it without a gap (the network's jitter is not a pause). Right: the
assistant's audio as it was heard: a response starts when its first audio went out (or when
the one before it ended, if later), each delta at its ``start_ms``, and it stops where it was
cut, by a truncate or a playback acknowledgement that truncates (``committed_ms``), or else by
its cancel (a barge-in, a clear) at the cancel's time. What was sent and never played is in the
events, not in the track.

A response is placed once its cut can no longer change: its end seen and then a truncate, or
:data:`SETTLE_S` after it would have stopped playing. The file holds every frame up to the
earliest moment either track may still change (the *horizon*); the header's sizes are brought up
to date every :data:`HEADER_EVERY_S` of audio and at the end. The tracks are made by the readers
from a part's wire log (:mod:`.derive`), told the time as the log goes, as the server's writer
thread once made them as the session went (format 1).

Audio a client sends faster than real time is laid end to end, ahead of the clock, and waits
in memory for the horizon to reach it. At most :data:`MAX_AHEAD_S` of it waits: an append that
would hold more raises :class:`AheadOfClock`. The server keeps the same clock as it writes the
log and stops the recording there (``ahead_of_clock``, in its manifest and the metric) while
its session goes on, so a log never holds more. A client at real time is never near it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from omni_grpc import audio
from omni_grpc.audio.wav import wav_header
from omni_grpc.wire import pb

Pcm16 = npt.NDArray[np.int16]
JITTER_S = 0.2  # an append this late after the one before still follows it without a gap
LONGEST_APPEND_S = 1.0  # how far back of its arrival an append may start, for the horizon
SETTLE_S = 2.0  # a response's cut is final this long after it would have stopped playing
HEADER_EVERY_S = 0.5
# A response still open is laid on the track a second at a time as it is heard (its seams are
# resampled apart when its rate is not the track's).
LAY_STEP_MS = 1000.0
EDGE_MS = 20.0  # audio either side of a stretch being resampled, so its edges do not ring
WRITE_SLICE_FRAMES = 1 << 18  # silence over a long pause is written a slice at a time
TRACKS = 2  # the WAV's channels: what the user said, what the engine said
# The user's audio that may wait ahead of the clock (sent faster than real time), in seconds.
MAX_AHEAD_S = 120.0


class AheadOfClock(Exception):
    """The user's audio runs further ahead of the clock than :data:`MAX_AHEAD_S`."""


@dataclass(slots=True)
class _Response:
    """One response's audio until it is placed: its chunks at their own rate and form."""

    first_s: float  # when its first audio went out
    item_id: str = ""
    # (start_ms, pcm16 bytes, Hz), as they came
    chunks: list[tuple[float, bytes, int]] = field(default_factory=list)
    length_ms: float = 0.0  # the end of its audio on its own clock
    ended_s: float | None = None  # when response_done or output_audio_cleared came
    cancel_s: float | None = None  # when a cancel stopped it (heard up to then at most)
    heard_ms: float | None = None  # where a truncate cut it
    anchor: int | None = None  # its first frame on the track, once the one before is placed
    done_ms: float = 0.0  # how much of it is on the track already (a long response's start)


@dataclass(frozen=True, slots=True)
class Placed:
    """A response's heard audio, placed on the right track."""

    response_id: str
    start: int  # frame
    frames: int
    audio_ms: float  # what was sent
    heard_ms: float
    cut: str  # "truncate", "cancel" or "" (heard whole)


class Tracks:
    """The stereo WAV of one part (``file`` None: a recording without audio, where only the
    places are kept)."""

    def __init__(self, file: BinaryIO | None, rate_hz: int) -> None:
        self.rate = rate_hz
        self._file = file
        self.written = 0  # frames in the file
        self._header_at = 0  # frames the header says
        self._user_end = 0  # where the user's next append may start (frame)
        self._user: list[tuple[int, Pcm16]] = []  # placed, not yet written
        self._run_start, self._run = 0, bytearray()  # the appends placed end to end lately
        self._heard: list[tuple[int, Pcm16]] = []
        self._assistant_end = 0
        self._responses: dict[str, _Response] = {}  # not yet placed, in order
        self._items: dict[str, str] = {}  # item id -> response id, for truncates
        self._max_ahead = round(MAX_AHEAD_S * rate_hz)
        if file is not None:
            file.write(wav_header(rate_hz, 0, TRACKS))

    # -- the user --------------------------------------------------------------------------

    def user(self, at_s: float, data: bytes, encoding: int, rate_hz: int) -> tuple[int, int, bool]:
        """Places an append the engine received at ``at_s``: returns (start frame, frames,
        whether it was resampled for the track)."""
        resampled = bool(rate_hz) and rate_hz != self.rate
        if encoding in (0, pb.AUDIO_ENCODING_PCM16) and not resampled:
            raw = data  # the usual append: kept as it is, no array made
        else:
            pcm = audio.decode_pcm16(data, encoding, rate_hz or self.rate)
            raw = _resampled(pcm, rate_hz, self.rate).tobytes() if resampled else pcm.tobytes()
        frames = len(raw) // 2
        arrived = self._frame(at_s)
        start = self._user_end
        if arrived - frames - self._frame(JITTER_S) > start:
            start = arrived - frames  # a pause before it: it starts when it was captured
        if start < self.written:
            start = self.written
        self._user_end = start + frames
        if self._user_end - arrived > self._max_ahead:
            raise AheadOfClock(
                f"the user's audio runs {(self._user_end - arrived) / self.rate:.0f} s ahead "
                f"of the clock (at most {MAX_AHEAD_S:g} s may wait)"
            )
        if self._file is not None and frames:
            if self._run and start == self._run_start + len(self._run) // 2:
                self._run += raw  # follows the one before: one run, one array when written
            else:
                self._end_run()
                self._run_start, self._run = start, bytearray(raw)
        return start, frames, resampled

    def _end_run(self) -> None:
        if self._run:
            self._user.append((self._run_start, audio.pcm16_ints(bytes(self._run))))
            self._run = bytearray()

    # -- the assistant ---------------------------------------------------------------------

    def output(self, at_s: float, delta: pb.OutputAudioDelta, data: bytes) -> None:
        """An audio delta (its audio: ``data``) that went out at ``at_s``."""
        response = self._responses.get(delta.response_id)
        if response is None:
            response = self._responses[delta.response_id] = _Response(at_s)
        item_id = delta.item_id
        if item_id and item_id != response.item_id:
            response.item_id = item_id
            self._items[item_id] = delta.response_id
        rate = delta.sample_rate_hz or self.rate
        encoding = delta.encoding
        if self._file is None:  # only its length counts
            raw = bytes(round(delta.duration_ms * rate / 1000) * 2)
        elif encoding in (0, pb.AUDIO_ENCODING_PCM16):
            raw = data
        else:
            raw = audio.decode_pcm16(data, encoding, rate).tobytes()
        start_ms = delta.start_ms
        response.chunks.append((start_ms, raw, rate))
        end_ms = start_ms + len(raw) * 500 / rate
        if end_ms > response.length_ms:
            response.length_ms = end_ms

    def ended(self, at_s: float, response_id: str, cancelled: bool) -> None:
        """The response's end (``response_done``, or ``output_audio_cleared``: cancelled)."""
        response = self._responses.get(response_id)
        if response is None:
            return
        response.ended_s = response.ended_s if response.ended_s is not None else at_s
        if cancelled and response.cancel_s is None:
            response.cancel_s = at_s

    def truncated(self, item_or_response: str, heard_ms: float) -> None:
        """A truncate (by item) or a truncating playback acknowledgement (by response)."""
        response_id = self._items.get(item_or_response, item_or_response)
        response = self._responses.get(response_id)
        if response is not None:
            response.heard_ms = heard_ms

    # -- writing ---------------------------------------------------------------------------

    def advance(self, now_s: float) -> list[Placed]:
        """Places the responses whose cut is final by ``now_s`` and writes every frame both
        tracks hold for good; returns what was placed."""
        placed = self._place(now_s, closing=False)
        user_final = max(self._user_end, self._frame(now_s - JITTER_S - LONGEST_APPEND_S))
        assistant_final = max(self._assistant_end, self._frame(now_s))
        if self._responses:
            first = next(iter(self._responses.values()))
            assert first.anchor is not None
            assistant_final = first.anchor + self._frame(first.done_ms / 1000)
        self._write_until(min(user_final, assistant_final))
        return placed

    def close(self, now_s: float) -> list[Placed]:
        """Places every response as it stands, writes everything, and closes the file."""
        placed = self._place(now_s, closing=True)
        self._end_run()
        ends = [start + len(pcm) for start, pcm in self._user + self._heard]
        end = max([self._user_end, self._assistant_end, self.written, *ends])
        self._write_until(end)
        if self._file is not None:
            self._rewrite_header()
            self._file.close()
        return placed

    def drop(self) -> None:
        """Closes the file as it is (a write failed)."""
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):
                file.close()

    def _frame(self, seconds: float) -> int:
        return max(0, round(seconds * self.rate))

    def _place(self, now_s: float, *, closing: bool) -> list[Placed]:
        """Places, in order, each response whose cut is final; of the first one still open,
        the audio heard more than :data:`SETTLE_S` ago (a long answer is written as it plays,
        not held to its end; a truncate cuts only what came later)."""
        placed = []
        while self._responses:
            response_id, response = next(iter(self._responses.items()))
            if response.anchor is None:
                response.anchor = max(self._assistant_end, self._frame(response.first_s))
            anchor = response.anchor
            length_ms = response.length_ms
            heard_ms, cut = length_ms, ""
            if response.cancel_s is not None:
                played_ms = response.cancel_s * 1000 - anchor * 1000 / self.rate
                heard_ms, cut = min(length_ms, max(0.0, played_ms)), "cancel"
            if response.heard_ms is not None:
                heard_ms, cut = min(length_ms, response.heard_ms), "truncate"
            heard_ms = max(heard_ms, response.done_ms)
            stops_s = anchor / self.rate + heard_ms / 1000
            final = response.ended_s is not None and (
                response.heard_ms is not None or now_s >= max(stops_s, response.ended_s) + SETTLE_S
            )
            if not (final or closing):
                settled_ms = (now_s - SETTLE_S) * 1000 - anchor * 1000 / self.rate
                if settled_ms - response.done_ms >= LAY_STEP_MS:
                    self._lay(response, min(settled_ms, heard_ms))
                break
            del self._responses[response_id]
            self._lay(response, heard_ms)
            self._assistant_end = anchor + round(heard_ms * self.rate / 1000)
            frames = self._assistant_end - anchor
            placed.append(Placed(response_id, anchor, frames, length_ms, heard_ms, cut))
        return placed

    def _lay(self, response: _Response, upto_ms: float) -> None:
        """Puts the response's audio on the track from where it stopped up to ``upto_ms``."""
        if upto_ms <= response.done_ms:
            return
        assert response.anchor is not None
        pcm = self._assemble(response, response.done_ms, upto_ms)
        if self._file is not None and len(pcm):
            self._heard.append((response.anchor + self._frame(response.done_ms / 1000), pcm))
        response.done_ms = upto_ms

    def _assemble(self, response: _Response, from_ms: float, upto_ms: float) -> Pcm16:
        """The response's audio from ``from_ms`` to ``upto_ms`` of its clock at the track's
        rate, each chunk at its ``start_ms``: laid out at the chunks' own rate, with
        :data:`EDGE_MS` more on either side, and resampled at once, so neither the seams
        between chunks nor the cut ring. The chunks used up are let go."""
        rates = {rate for _, _, rate in response.chunks}
        rate = rates.pop() if len(rates) == 1 else self.rate
        lo_ms, hi_ms = max(0.0, from_ms - EDGE_MS), min(response.length_ms, upto_ms + EDGE_MS)
        origin = round(lo_ms * rate / 1000)
        out = np.zeros(max(0, round(hi_ms * rate / 1000) - origin), dtype=np.int16)
        kept = []
        for start_ms, raw, chunk_rate in response.chunks:
            if start_ms + len(raw) * 500 / chunk_rate > upto_ms - EDGE_MS:
                kept.append((start_ms, raw, chunk_rate))
            pcm = audio.pcm16_ints(raw)
            if chunk_rate != rate and len(pcm):
                pcm = _resampled(pcm, chunk_rate, rate)
            at = round(start_ms * rate / 1000) - origin
            lo, hi = max(at, 0), min(at + len(pcm), len(out))
            if lo < hi:
                out[lo:hi] = pcm[lo - at : hi - at]
        response.chunks = kept
        if rate != self.rate and len(out):
            out = _resampled(out, rate, self.rate)
        skip = self._frame((from_ms - lo_ms) / 1000)
        return out[skip : skip + self._frame((upto_ms - from_ms) / 1000)]

    def _write_until(self, horizon: int) -> None:
        if self.written < horizon:
            self._end_run()
        while self.written < horizon:
            count = min(horizon - self.written, WRITE_SLICE_FRAMES)
            if self._file is not None:
                block = audio.silent_pcm16_frames(count, 2)
                self._user = _paste(block, self.written, 0, self._user)
                self._heard = _paste(block, self.written, 1, self._heard)
                self._file.write(block.tobytes())
            self.written += count
        if self._file is not None and self.written - self._header_at >= HEADER_EVERY_S * self.rate:
            self._rewrite_header()

    def _rewrite_header(self) -> None:
        assert self._file is not None
        self._file.flush()
        self._file.seek(0)
        self._file.write(wav_header(self.rate, self.written, TRACKS))
        self._file.seek(0, 2)
        self._header_at = self.written


def _resampled(pcm: Pcm16, from_hz: int, to_hz: int) -> Pcm16:
    samples = audio.resample(audio.samples_from_pcm16(pcm.tobytes()), from_hz, to_hz)
    return audio.pcm16_ints(audio.samples_to_pcm16(samples)).astype(np.int16)


def _paste(
    block: npt.NDArray[np.int16], origin: int, channel: int, pieces: list[tuple[int, Pcm16]]
) -> list[tuple[int, Pcm16]]:
    """Copies into ``block`` (frames from ``origin``) what of ``pieces`` falls in it; returns
    what is left for later blocks."""
    end = origin + len(block)
    left = []
    for index, (start, pcm) in enumerate(pieces):
        if start >= end:  # placed in order: these wait for a later block
            left.extend(pieces[index:])
            break
        stop = start + len(pcm)
        lo, hi = max(start, origin), min(stop, end)
        if lo < hi:
            block[lo - origin : hi - origin, channel] = pcm[lo - start : hi - start]
        if stop > end:
            left.append((max(start, end), pcm[max(start, end) - start :]))
    return left
