"""The kit's noise reduction (RNNoise): it lowers noise, keeps speech, keeps its frames whole
across appends, and runs in a kit session before whatever hears the input."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from omni_grpc.core import commands as cmd
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.kit import denoise
from omni_grpc.engine.kit.denoise import FRAME, Denoiser
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.wire import pb
from tests.scripts import load_script

NEAR, FAR = pb.NOISE_REDUCTION_TYPE_NEAR_FIELD, pb.NOISE_REDUCTION_TYPE_FAR_FIELD
RATE = 16_000
# RNNoise's output lags its input by one of its frames (10 ms), the two filters by 1.4 ms.
LAG = FRAME + 23


def _through(denoiser: Denoiser, signal: npt.NDArray[np.float64], chunk: int) -> np.ndarray:
    pcm = (np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes()
    out = b"".join(denoiser.process(pcm[i : i + 2 * chunk]) for i in range(0, len(pcm), 2 * chunk))
    return np.frombuffer(out, "<i2").astype(np.float64) / 32768


def _db(power: float) -> float:
    return float(10 * np.log10(max(power, 1e-20)))


def _power(signal: np.ndarray) -> float:
    return float(np.mean(np.square(signal)))


@pytest.mark.parametrize(("kind", "bound_db"), [(NEAR, 14.0), (FAR, 20.0)])
def test_noise_alone_is_lowered(kind: pb.NoiseReductionType.ValueType, bound_db: float) -> None:
    noise = np.random.default_rng(7).normal(0.0, 0.05, 3 * RATE)  # -26 dBFS of white noise
    out = _through(Denoiser(kind), noise, 320)
    settled = slice(RATE, None)  # after its first second, when it has learnt the noise
    lowered = _db(_power(noise[settled])) - _db(_power(out[settled]))
    # Nearly as far as the input mixed back lets it (the bound), and never further.
    assert bound_db - 3 < lowered < bound_db + 1


def test_appends_of_any_length_come_out_as_whole_frames_in_order() -> None:
    denoiser = Denoiser(NEAR)
    sizes = [320, 1600, 7, 150, 163, 1, 480, 2]  # samples: 20 ms, 100 ms, then torn frames
    total, made = 0, 0
    for size in sizes:
        out = denoiser.process(bytes(2 * size))
        total += size
        made += len(out) // 2
        assert made == total - total % FRAME  # what waits is less than a frame
    assert Denoiser(FAR).process(bytes(640)) == bytes(640)  # 20 ms of silence: 20 ms of it
    denoiser.close()
    denoiser.close()  # closing twice frees the state once


def test_the_library_is_found_without_importing_pyrnnoise() -> None:
    import sys

    assert denoise.library_path().name == denoise.LIBRARY
    assert denoise.offered() == (NEAR, FAR)
    assert "pyrnnoise" not in sys.modules  # its __init__ imports what we do not install


async def test_a_kit_session_hears_the_denoised_input_and_an_update_turns_it_off() -> None:
    engine = LoopbackEngine({})
    assert engine.features.noise_reduction_types == (NEAR, FAR)
    on = pb.SessionConfig(noise_reduction=pb.NoiseReduction(type=FAR))
    config = resolve_config(on, Limits(), engine.features)
    session = await engine.open_session("sess_denoise", config)
    try:
        noise = np.random.default_rng(3).normal(0.0, 0.05, RATE)
        pcm = (noise * 32767).astype("<i2").tobytes()
        for start in range(0, len(pcm), 650):  # 20.3 ms appends: frames torn between them
            await session.submit(cmd.AppendAudio(audio=pcm[start : start + 650]))
        await session.idle()
        heard = np.frombuffer(bytes(session._input), "<i2").astype(np.float64) / 32768
        assert len(heard) == RATE  # the last 10 ms wait for the next append
        assert _db(_power(noise[RATE // 2 :])) - _db(_power(heard[RATE // 2 :])) > 15
        off = pb.SessionConfig(noise_reduction=pb.NoiseReduction(type=pb.NOISE_REDUCTION_TYPE_OFF))
        config = merge_config(config, off, Limits(), engine.features)
        await session.submit(cmd.UpdateSession(config=config))
        await session.submit(cmd.AppendAudio(audio=pcm[:640]))
        await session.idle()
        assert bytes(session._input).endswith(pcm[:640])  # as it was sent
        assert session._denoiser is None
    finally:
        await session.close()


def test_a_mirror_loopback_reduces_no_noise() -> None:
    assert LoopbackEngine({"mode": "mirror"}).features.noise_reduction_types == ()


@pytest.mark.subprocess  # espeak-ng speaks
@pytest.mark.parametrize("kind", [NEAR, FAR])
def test_speech_is_kept_and_the_noise_under_it_lowered(
    kind: pb.NoiseReductionType.ValueType,
) -> None:
    speech = load_script("make_test_speech")
    said = speech.say("the weather in paris is sunny today and tomorrow it will rain")
    clean = np.concatenate([np.zeros(RATE // 2), said, np.zeros(RATE // 2)]) * 0.5
    noise = np.random.default_rng(11).normal(0.0, 0.03, clean.size)
    out = _through(Denoiser(kind), clean + noise, 320)
    aligned_out = out[LAG:]
    reference = clean[: aligned_out.size]
    # The lag is what the docstring says: the output lines up with the clean speech there.
    lags = range(LAG - 40, LAG + 40)
    best = max(lags, key=lambda lag: float(np.dot(out[lag:], clean[: out.size - lag])))
    assert abs(best - LAG) <= 3
    speaking = np.abs(reference) > 0.02
    silent = np.abs(np.convolve(reference, np.ones(800), "same")) < 1e-6
    # The noise between the words is lowered...
    noise_db = _db(_power(noise[: aligned_out.size][silent]))
    assert noise_db - _db(_power(aligned_out[silent])) > 10
    # ...the speech keeps its level (far field may raise it; never by more than its cap)...
    speech_db = _db(_power(reference[speaking]))
    kept = _db(_power(aligned_out[speaking])) - speech_db
    assert -6 < kept < (18 if kind == FAR else 1.5), kept
    # ...so the words stand out of what is between them by far more than they did.
    noisy = (clean + noise)[: aligned_out.size]
    before = _db(_power(noisy[speaking])) - _db(_power(noisy[silent]))
    after = _db(_power(aligned_out[speaking])) - _db(_power(aligned_out[silent]))
    assert after > before + 10, (before, after)
