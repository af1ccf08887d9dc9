"""The shared vocabulary agrees with the contract it describes."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys

import pytest

from omni_grpc.audio import formats
from omni_grpc.wire import keys, kinds, names, pb, pcm
from omni_grpc.wire.keys import (
    LABEL_SECRET_ENV,
    bearer_key,
    bearer_metadata,
    key_label,
    key_matches,
    set_label_secret,
    use_label_secret,
)


def _oneof_fields(message: type) -> set[str]:
    descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
    (oneof,) = [o for o in descriptor.oneofs if o.name in ("command", "event")]
    return {field.name for field in oneof.fields}


@pytest.mark.parametrize(
    ("message", "sets"),
    [(pb.ConverseRequest, kinds.COMMAND_SETS), (pb.ConverseResponse, kinds.EVENT_SETS)],
    ids=["commands", "events"],
)
def test_every_kind_of_the_contract_is_in_exactly_one_set(message, sets) -> None:
    fields = _oneof_fields(message)
    union = set().union(*sets)
    assert union == fields, f"missing {fields - union}, unknown {union - fields}"
    for first, second in itertools.combinations(sets, 2):
        assert not first & second, f"{sorted(first & second)} in two sets"


def test_the_audio_layer_decodes_every_encoding_and_rate_the_vocabulary_names() -> None:
    for encoding, width in pcm.SAMPLE_WIDTH.items():
        for rate in pcm.SUPPORTED_RATES_HZ:
            assert formats.decode(b"\0" * width * 3, encoding, rate).shape == (3,)
    assert pcm.CANONICAL_INPUT.sample_rate_hz in pcm.SUPPORTED_RATES_HZ
    assert pcm.CANONICAL_OUTPUT.sample_rate_hz in pcm.SUPPORTED_RATES_HZ
    assert pcm.pcm16_ms(pcm.pcm16_bytes(20, 16000), 16000) == 20


def test_keys_match_only_a_configured_key() -> None:
    assert key_matches("k2", ["k1", "k2"])
    assert not key_matches("k", ["k1", "k2"])
    assert not key_matches("", ["k1"])
    assert bearer_key(bearer_metadata("secret")) == "secret"
    assert bearer_key([("authorization", "Basic x")]) == ""
    assert bearer_metadata("") == ()


@pytest.mark.parametrize(
    ("table", "enum"),
    [
        (names.OVERLAP_POLICIES, pb.OverlapPolicy),
        (names.OVERLAP_ACTIONS, pb.OverlapAction),
        (names.RESPONSE_STATUSES, pb.ResponseStatus),
        (names.ITEM_STATUSES, pb.ItemStatus),
    ],
    ids=["overlap_policies", "overlap_actions", "response_statuses", "item_statuses"],
)
def test_every_enum_value_has_one_realtime_name(table, enum) -> None:
    named = {value for name, value in enum.items() if not name.endswith("_UNSPECIFIED")}
    assert sorted(table.values()) == sorted(named)  # each value once, none left out


@pytest.fixture
def label_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's label secret is put back after the test (other tests count labels)."""
    monkeypatch.setattr(keys, "_label_secret", keys._label_secret)


@pytest.mark.usefixtures("label_secret")
def test_a_key_label_is_keyed_so_a_guess_cannot_be_checked_against_it() -> None:
    set_label_secret("deployment-secret")
    label = key_label("k1")
    assert len(label) == 12 and label == key_label("k1") != key_label("k2")
    assert label != hashlib.sha256(b"k1").hexdigest()[:12]  # no longer a plain hash of the key
    assert key_label("") == "none"
    set_label_secret("another-secret")
    assert key_label("k1") != label  # who holds no secret cannot make a key's label
    use_label_secret({LABEL_SECRET_ENV: "deployment-secret"})
    assert key_label("k1") == label  # every process given the same secret labels alike


@pytest.mark.usefixtures("label_secret")
@pytest.mark.subprocess  # the command, run as an operator runs it
def test_key_label_prints_a_keys_label_from_standard_input() -> None:
    env = {**os.environ, LABEL_SECRET_ENV: "deployment-secret"}
    command = [sys.executable, "-m", "omni_cli", "key-label"]
    done = subprocess.run(command, input="k1\n", env=env, capture_output=True, text=True)
    set_label_secret("deployment-secret")
    assert (done.returncode, done.stdout.strip()) == (0, key_label("k1"))
    env.pop(LABEL_SECRET_ENV)
    done = subprocess.run(command, input="k1\n", env=env, capture_output=True, text=True)
    assert done.returncode == 2 and LABEL_SECRET_ENV in done.stderr
