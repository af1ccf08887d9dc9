"""SessionConfig.truncation: checked once in the core, filled with auto, refused typed where
the engine honours auto alone, and replaced whole by an update."""

from __future__ import annotations

import math

import pytest

from omni_grpc.core import CommandError, EngineFeatures, Limits
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.core.validation import check_truncation
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import MAX_POST_INSTRUCTIONS_TOKENS

LIMITS = Limits()
COUNTS = EngineFeatures(name="counts", default_model="m", supports_truncation=True)
AUTO_ONLY = EngineFeatures(name="auto-only", default_model="m")
AUTO, DISABLED = pb.TRUNCATION_TYPE_AUTO, pb.TRUNCATION_TYPE_DISABLED
RATIO = pb.TRUNCATION_TYPE_RETENTION_RATIO


def _ratio(ratio: float, limit: int | None = None) -> pb.Truncation:
    truncation = pb.Truncation(type=RATIO, retention_ratio=ratio)
    if limit is not None:
        truncation.post_instructions_token_limit = limit
    return truncation


def _refusal(truncation: pb.Truncation, engine: EngineFeatures = COUNTS) -> CommandError:
    with pytest.raises(CommandError) as raised:
        resolve_config(pb.SessionConfig(truncation=truncation), LIMITS, engine)
    return raised.value


def test_unset_truncation_is_auto_on_every_engine() -> None:
    for engine in (COUNTS, AUTO_ONLY):
        config = resolve_config(pb.SessionConfig(), LIMITS, engine)
        assert config.truncation == pb.Truncation(type=AUTO)


@pytest.mark.parametrize(
    "truncation",
    [
        pb.Truncation(type=AUTO),
        pb.Truncation(type=AUTO, post_instructions_token_limit=100),
        pb.Truncation(type=DISABLED),
        _ratio(0.0),
        _ratio(0.5, 1),
        _ratio(1.0, MAX_POST_INSTRUCTIONS_TOKENS),
    ],
)
def test_an_engine_that_counts_takes_each_truncation(truncation: pb.Truncation) -> None:
    config = resolve_config(pb.SessionConfig(truncation=truncation), LIMITS, COUNTS)
    assert config.truncation == truncation


@pytest.mark.parametrize(
    ("truncation", "param"),
    [
        (_ratio(-0.01), "truncation.retention_ratio"),
        (_ratio(1.01), "truncation.retention_ratio"),
        (_ratio(math.nan), "truncation.retention_ratio"),
        (pb.Truncation(type=RATIO), "truncation.retention_ratio"),
        (pb.Truncation(type=AUTO, retention_ratio=0.5), "truncation.retention_ratio"),
        (_ratio(0.5, 0), "truncation.post_instructions_token_limit"),
        (_ratio(0.5, MAX_POST_INSTRUCTIONS_TOKENS + 1), "truncation.post_instructions_token_limit"),
        (
            pb.Truncation(type=DISABLED, post_instructions_token_limit=10),
            "truncation.post_instructions_token_limit",
        ),
        (pb.Truncation(type=7), "truncation.type"),  # type: ignore[arg-type]
    ],
    ids=[
        "ratio-below-0",
        "ratio-above-1",
        "ratio-nan",
        "ratio-missing",
        "ratio-on-auto",
        "limit-0",
        "limit-too-large",
        "limit-on-disabled",
        "unknown-type",
    ],
)
def test_a_truncation_out_of_bounds_is_refused_naming_its_field(
    truncation: pb.Truncation, param: str
) -> None:
    with pytest.raises(CommandError) as raised:
        check_truncation(truncation)
    assert (raised.value.code, raised.value.param) == ("invalid_session_config", param)
    # The same check is the one open and update run (whatever the engine).
    refused = _refusal(truncation, AUTO_ONLY)
    assert (refused.code, refused.param) == ("invalid_session_config", param)


@pytest.mark.parametrize(
    "truncation",
    [
        pb.Truncation(type=DISABLED),
        _ratio(0.8),
        pb.Truncation(type=AUTO, post_instructions_token_limit=100),
    ],
    ids=["disabled", "retention-ratio", "auto-with-limit"],
)
def test_an_engine_that_honours_auto_alone_refuses_the_others_typed(
    truncation: pb.Truncation,
) -> None:
    refused = _refusal(truncation, AUTO_ONLY)
    assert (refused.code, refused.param) == ("unsupported_truncation", "truncation")
    assert "auto-only" in refused.message


def test_an_update_replaces_the_truncation_whole() -> None:
    current = resolve_config(pb.SessionConfig(truncation=_ratio(0.5, 300)), LIMITS, COUNTS)
    patch = pb.SessionConfig(truncation=pb.Truncation(type=DISABLED))
    merged = merge_config(current, patch, LIMITS, COUNTS)
    # Merged field by field, the ratio and the limit would stay and make DISABLED invalid.
    assert merged.truncation == pb.Truncation(type=DISABLED)
    kept = merge_config(merged, pb.SessionConfig(instructions="hi"), LIMITS, COUNTS)
    assert kept.truncation == pb.Truncation(type=DISABLED)
