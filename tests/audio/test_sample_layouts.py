"""pcm16 bytes to float samples and back, and WAV's integer layouts, read in one place.

The engines' VAD, Whisper front end and voices and the talk command's WAV reader each decoded
pcm16 themselves before; each reference below is what one of them computed, and the one place
must give the same numbers to the bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from omni_grpc import audio
from omni_grpc.wire import pb

EVERY_PCM16 = np.arange(-32768, 32768, dtype="<i2").tobytes()


def test_every_pcm16_sample_reads_as_the_vad_and_whisper_read_it() -> None:
    samples = audio.samples_from_pcm16(EVERY_PCM16)
    before = np.frombuffer(EVERY_PCM16, dtype="<i2").astype(np.float32) / 32768.0
    assert samples.dtype == np.float32
    assert samples.tobytes() == before.tobytes()
    assert samples.tobytes() == audio.decode(EVERY_PCM16, pb.AUDIO_ENCODING_PCM16, 16000).tobytes()


def test_float_samples_write_as_the_voices_wrote_them() -> None:
    rng = np.random.default_rng(7)
    samples = np.concatenate(
        [
            rng.uniform(-1.2, 1.2, 10_000).astype(np.float32),
            (np.arange(-40, 40, dtype=np.float32) + 0.5) / 32768,  # halfway between two steps
            np.array([1.0, -1.0, 2.0, -3.0, 32767.5 / 32768, -32768.5 / 32768], np.float32),
        ]
    )
    before = audio.formats.float_to_pcm16(samples).astype("<i2").tobytes()
    assert audio.samples_to_pcm16(samples) == before
    assert audio.samples_to_pcm16(audio.samples_from_pcm16(EVERY_PCM16)) == EVERY_PCM16


def _talk_reader_before(frames: bytes, width: int, channels: int) -> npt.NDArray[np.float64]:
    """What the talk command read from WAV frames, on the 16-bit scale."""
    if width == 1:
        samples = (np.frombuffer(frames, dtype=np.uint8).astype(np.float64) - 128) * 256
    elif width == 2:
        samples = np.frombuffer(frames, dtype="<i2").astype(np.float64)
    elif width == 3:
        raw = np.frombuffer(frames, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        value = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        samples = (np.where(value >= 1 << 23, value - (1 << 24), value) / 256).astype(np.float64)
    else:
        samples = np.frombuffer(frames, dtype="<i4").astype(np.float64) / 65536
    mono: npt.NDArray[np.float64] = samples.reshape(-1, channels).mean(axis=1)
    return mono


@pytest.mark.parametrize("channels", [1, 2, 3])
@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_wav_frames_read_as_the_talk_command_read_them(width: int, channels: int) -> None:
    frames = np.random.default_rng(width * 10 + channels).bytes(width * channels * 4000)
    edges = {1: [0, 255, 128], 2: [-32768, 32767], 3: [-(1 << 23), (1 << 23) - 1], 4: [-(1 << 31)]}
    for value in edges[width]:  # full scale each way, in every channel
        sample = (value + 128 if width == 1 else value) % (1 << (8 * width))
        frames += sample.to_bytes(width, "little") * channels
    samples = audio.samples_from_pcm_frames(frames, width, channels)
    before = _talk_reader_before(frames, width, channels)
    assert samples.dtype == np.float64
    assert (samples * 32768).tobytes() == before.tobytes()  # scaled by a power of two: exact
    # Written back as pcm16 in float64, as the talk command rounded its 16-bit scale.
    rounded = np.clip(np.rint(before), -32768, 32767).astype("<i2").tobytes()
    assert audio.samples_to_pcm16(samples) == rounded


def test_a_wav_width_without_a_layout_is_refused() -> None:
    with pytest.raises(audio.AudioFormatError, match="unsupported sample width: 5 bytes"):
        audio.samples_from_pcm_frames(bytes(10), 5, 1)
