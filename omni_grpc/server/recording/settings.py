"""How a server records its sessions: the policy, where, what is left out, and for how long."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omni_grpc.core.config import RECORDING_POLICIES

DAY_S = 86400.0
# What a recording may leave out (``--record-redact``): its audio, or its text.
REDACTIONS = ("audio", "text")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSettings:
    """``omni-grpc serve --record ... --record-dir ...`` and the retention of recordings."""

    policy: str = "off"  # one of RECORDING_POLICIES
    folder: Path = field(default_factory=lambda: Path("recordings"))
    omit_audio: bool = False  # every recording without audio (transcripts and timings only)
    omit_text: bool = False  # every recording without text
    # The sweep deletes recordings last written longer ago than this, then the oldest until
    # all of them together fit max_total_bytes (0: no bound of that kind).
    max_age_s: float = 30 * DAY_S
    max_total_bytes: int = 10 * 1024**3

    def describe(self) -> str:
        """What a server with these settings records, where, and for how long: its start-up
        line."""
        which = "every session" if self.policy == "all" else "the sessions that ask"
        left_out = [name for name, omit in (("audio", self.omit_audio),
                                            ("text", self.omit_text)) if omit]  # fmt: skip
        cap = self.max_total_bytes / 1024**2
        return (
            f"recording {which} (--record {self.policy}) into {self.folder.resolve()}"
            f"{', without ' + ' and '.join(left_out) if left_out else ''}; kept "
            f"{self.max_age_s / DAY_S:g} days, {f'{cap:g} MiB' if cap else 'no size cap'}"
        )

    def __post_init__(self) -> None:
        if self.policy not in RECORDING_POLICIES:
            raise ValueError(f"record must be one of {', '.join(RECORDING_POLICIES)}")
        if self.max_age_s < 0 or self.max_total_bytes < 0:
            raise ValueError("record_max_age_s and record_max_bytes must not be negative")


__all__ = ["DAY_S", "REDACTIONS", "RecordSettings"]
