"""The engine kit's truncation rule (omni_grpc.engine.kit.truncation), as a pure function: which
oldest items a response drops from what it reads, under auto, retention_ratio and disabled."""

from __future__ import annotations

import pytest

from omni_grpc.engine.kit.truncation import Cut, cut, limit_of
from omni_grpc.wire import pb

AUTO = pb.Truncation(type=pb.TRUNCATION_TYPE_AUTO)
DISABLED = pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED)


def ratio(value: float) -> pb.Truncation:
    return pb.Truncation(type=pb.TRUNCATION_TYPE_RETENTION_RATIO, retention_ratio=value)


@pytest.mark.parametrize("truncation", [AUTO, DISABLED, ratio(0.5)])
def test_what_fits_is_read_whole(truncation: pb.Truncation) -> None:
    assert cut([3, 4, 5], 12, truncation) == Cut(0, 12)
    assert cut([3, 4, 5], None, truncation) == Cut(0, 12)  # no bound known: nothing is cut
    assert cut([], 10, truncation) == Cut(0, 0)


def test_auto_drops_the_oldest_until_the_rest_fits() -> None:
    assert cut([3, 4, 5], 11, AUTO) == Cut(1, 9)
    assert cut([3, 4, 5], 9, AUTO) == Cut(1, 9)
    assert cut([3, 4, 5], 8, AUTO) == Cut(2, 5)


def test_auto_starts_over_at_each_turn_so_its_start_moves_with_every_item() -> None:
    tokens = [4, 4, 4]
    firsts = []
    for _ in range(4):
        tokens.append(4)
        firsts.append(cut(tokens, 12, AUTO, kept_first=0).first)
    # Each new item pushes one old one out: the prompt's start changes at every turn.
    assert firsts == [1, 2, 3, 4]


def test_the_newest_item_is_read_even_alone_over_the_limit() -> None:
    assert cut([2, 50], 10, AUTO) == Cut(1, 50)
    assert cut([2, 50], 10, ratio(0.5)) == Cut(1, 50)


def test_disabled_drops_nothing_and_says_it_does_not_fit() -> None:
    assert cut([3, 4, 5], 11, DISABLED) == Cut(0, 12, fits=False)
    assert cut([50], 10, DISABLED) == Cut(0, 50, fits=False)


def test_retention_ratio_cuts_to_its_share_of_the_limit() -> None:
    # Over 20: dropped until at most 0.5 x 20 = 10 remain.
    assert cut([5, 5, 5, 5, 4], 20, ratio(0.5)) == Cut(3, 9)
    # A ratio of 1 is auto; of 0, the newest item alone.
    assert cut([5, 5, 5, 5, 4], 20, ratio(1.0)) == Cut(1, 19)
    assert cut([5, 5, 5, 5, 4], 20, ratio(0.0)) == Cut(4, 4)


def test_retention_ratio_keeps_its_first_item_until_the_limit_is_passed_again() -> None:
    limit, truncation = 20, ratio(0.5)
    tokens = [5, 5, 5, 5, 4]
    first = cut(tokens, limit, truncation).first
    assert first == 3
    firsts = []
    for _ in range(5):
        tokens.append(3)
        reading = cut(tokens, limit, truncation, kept_first=first)
        assert reading.tokens <= limit
        first = reading.first
        firsts.append(first)
    # 9 + 3 + 3 + 3 = 18 fit with the same start; the next item passes 20 and cuts to <= 10.
    assert firsts == [3, 3, 3, 6, 6]


def test_retention_ratio_keeps_its_start_even_where_older_items_would_fit_again() -> None:
    # The items before the kept start stay out: the prompt's start does not move back.
    assert cut([1, 1, 1], 20, ratio(0.5), kept_first=2) == Cut(2, 1)
    # A kept start past the end (items deleted since) falls back to the newest.
    assert cut([1, 1], 20, ratio(0.5), kept_first=9) == Cut(1, 1)


def test_the_limit_is_the_window_lowered_to_post_instructions() -> None:
    limited = pb.Truncation(type=pb.TRUNCATION_TYPE_AUTO, post_instructions_token_limit=100)
    assert limit_of(AUTO, None) is None
    assert limit_of(AUTO, 500) == 500
    assert limit_of(limited, None) == 100
    assert limit_of(limited, 500) == 100
    assert limit_of(limited, 50) == 50
