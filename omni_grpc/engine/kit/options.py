"""Engine options: strings in (from the command line or the server settings), checked values out.

Every engine reads its options the same way: a converter per known key turns the string into a
value, an unknown key or a string the converter refuses is a ValueError that names it, and the
engine's option class checks the values (with :func:`check_range` and :func:`check_choice`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

Converters = dict[str, Callable[[str], object]]

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def parse_options(
    engine: str, options: Mapping[str, str], converters: Converters
) -> dict[str, object]:
    """The converted values of ``options``; ValueError naming any unknown key or bad value."""
    unknown = sorted(set(options) - set(converters))
    if unknown:
        raise ValueError(
            f"unknown {engine} option(s) {', '.join(unknown)}; known: {', '.join(converters)}"
        )
    values: dict[str, object] = {}
    for key, text in options.items():
        try:
            values[key] = converters[key](text)
        except ValueError:
            raise ValueError(f"{engine} option {key}={text!r} is not a valid value") from None
    return values


def parse_bool(text: str) -> bool:
    """Reads true/false, 1/0, yes/no or on/off."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(text)


def check_range(
    name: str, value: float, low: float, high: float = math.inf, *, above: bool = False
) -> None:
    """ValueError unless ``value`` is a number in ``[low, high]``, or ``(low, high]`` if
    ``above``."""
    if math.isfinite(value) and (low < value if above else low <= value) and value <= high:
        return
    if high != math.inf:
        bounds = f"in {'(' if above else '['}{low}, {high}]"
    else:
        bounds = f"above {low}" if above else f"at least {low}"
    raise ValueError(f"{name} must be {bounds}, got {value}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
