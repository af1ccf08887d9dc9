#!/usr/bin/env python3
"""The turn-taking set: scripted dialogues, synthesized at run time by espeak-ng.

Four kinds, each a user's side of one short exchange with the assistant:

* **complete**: a whole request, then silence; what is measured is how soon the answer sounds.
* **hesitation**: a request with a pause of 0.4 to 1.5 s inside it, where it cannot end ("I
  want to fly to ... Boston on Friday"); answering at the pause is answering early. The words
  before the pause are spoken as a person holding the turn speaks them, not as a finished
  sentence (espeak-ng ends a sentence with a final fall): with a clause's ending (a comma), and
  either a filler after them ("um", "uh") or their last word drawn out (SSML prosody).
* **backchannel**: over the assistant's reply, what a listener says to show they listen, a
  filler, or a cough; none of it should end the reply.
* **interruption**: over the reply, words that mean to take the turn ("No, wait, I meant
  Tuesday"); the reply's audio should stop at once, and the reply end.

**The held-out part** (:data:`HELD_OUT_COMPLETE`, :data:`HELD_OUT_HESITATIONS`): requests and
hesitations that no tuning of the judges looked at (their weights, thresholds and rules were
chosen on the rest); ``dialogues(part="held-out")`` plays them, scored only at the end.

Used by ``scripts/bench_turns.py`` and ``scripts/bench_judges.py``; from the command line it
writes the user's side of each dialogue as 16 kHz WAV files to listen to:

    scripts/turn_set.py OUT_DIR
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import make_test_speech as speech
import numpy as np

COMPLETE = (
    "what is the capital of france",
    "set a timer for ten minutes",
    "turn off the lights in the kitchen",
    "what time is it",
    "tell me a joke",
    "how many ounces are in a cup",
    "call my mother on her mobile",
    "what is the weather like in paris today",
    "please open the garage door",
    "what is twelve times eighteen",
)
# (the words before the pause, the pause in ms, the words after it, how the pause is held:
# "um" or "uh" a filler after the words, "drawl" their last word drawn out, "" only a comma)
HESITATIONS: tuple[tuple[str, int, str, str], ...] = (
    ("i want to fly to", 800, "boston on friday", ""),
    ("can you book a table for", 1200, "two people tonight", "drawl"),
    ("remind me to call my", 500, "sister at six", "um"),
    ("turn off the lights in the", 1000, "living room", ""),
    ("what is the weather in", 400, "london tomorrow", "uh"),
    ("please set an alarm for", 1500, "seven in the morning", "drawl"),
    ("i need to buy some", 700, "milk and eggs", "um"),
    ("add a meeting with", 1200, "john on monday", ""),
    ("play some music by", 900, "the beatles", "drawl"),
    ("how far is it from here to", 600, "the airport", "uh"),
)
# The held-out part: never looked at while the judges were tuned (module docstring).
HELD_OUT_COMPLETE = (
    "who wrote the book war and peace",
    "switch on the heating in the bedroom",
    "how long does it take to boil an egg",
    "send a message to david saying i am late",
)
HELD_OUT_HESITATIONS: tuple[tuple[str, int, str, str], ...] = (
    ("could you order a pizza with", 900, "mushrooms and olives", ""),
    ("what is the phone number of", 1100, "the nearest pharmacy", "um"),
    ("set the thermostat to", 700, "twenty one degrees", "drawl"),
    ("i would like to listen to", 1000, "some jazz", "uh"),
    ("read me the news about", 600, "the election", ""),
    ("book me a taxi to", 1200, "the station at nine", "drawl"),
)
# Said over a reply; COUGH is synthesized, not spoken.
COUGH = "(cough)"
BACKCHANNELS = (
    "yeah",
    "okay",
    "right",
    "uh huh",
    "i see",
    "sure",
    "hmm",
    "um",
    "oh really",
    "got it",
    COUGH,
)
INTERRUPTIONS = (
    "no wait, I meant tuesday",
    "stop",
    "wait a second",
    "actually, make it two people",
    "hold on, cancel that",
    "sorry, I said boston, not austin",
    "no, the other one",
)
# What the user asks before speaking over the reply: an answer long enough to speak over.
PROMPT = "tell me about the history of paris"
KINDS = ("complete", "hesitation", "backchannel", "interruption")
LEAD_MS = 300.0  # silence before the user speaks
TAIL_MS = 2500.0  # silence after, long enough for the longest wait a setting may choose


@dataclass(frozen=True, slots=True)
class Dialogue:
    """One exchange: its kind, a name, and the user's side as scenes.

    ``before`` is spoken from the session's start; for the overlapping kinds ``over`` is spoken
    once the reply to ``before`` has sounded for ``over_after_ms``. A scene's segments say
    where its speech truly is (ms from the scene's start).
    """

    kind: str
    name: str
    before: speech.Scene
    over: speech.Scene | None = None
    over_after_ms: float = 800.0
    pause_ms: float = 0.0  # a hesitation's pause

    @property
    def judged_pause(self) -> bool:
        """Whether the hesitation counts against the target (pauses of up to 1.2 s)."""
        return self.kind == "hesitation" and self.pause_ms <= 1200


def cough(seed: int = 0) -> speech.Signal:
    """A cough: a burst of breath noise with a voiced push in it, loud then dying in 250 ms."""
    rate = speech.RATE_HZ
    t = np.arange(int(rate * 0.25)) / rate
    rng = np.random.default_rng(seed)
    envelope = np.minimum(t / 0.01, 1.0) * np.exp(-t / 0.06)
    voiced = 0.5 * np.sin(2 * np.pi * 170 * t) * np.exp(-t / 0.03)
    return (0.4 * envelope * (rng.normal(0, 0.5, t.size) + voiced)).astype(np.float32)


def _over(text: str) -> speech.Scene:
    scene = speech.Scene()
    if text == COUGH:
        scene.add(cough())
        scene.segments.append((0.0, 250.0, text))
    else:
        scene.speak(text)
    return scene.pause(TAIL_MS)


def held(words: str, style: str) -> speech.Signal:
    """The words before a hesitation, spoken as the turn is held: a clause's ending (a comma),
    then a filler, or the last word drawn out (module docstring)."""
    if style == "drawl":
        *head, last = words.split()
        markup = f'<speak>{" ".join(head)} <prosody rate="x-slow">{last}</prosody>,</speak>'
        return speech.say(markup, ssml=True)
    if style in ("um", "uh"):
        return speech.say(f"{words}, {style},")
    if style:
        raise ValueError(f"unknown hesitation style {style!r}")
    return speech.say(f"{words},")


def _hesitation(first: str, pause_ms: int, rest: str, style: str) -> Dialogue:
    # espeak-ng ends a phrase with 180-450 ms of its own silence: cut, so that the pause is
    # the silence the dialogue says (the set before 2026-12-07 kept it: its pauses were about
    # 350 ms longer than their names).
    phrase = held(first, style)
    _, end_ms = speech.speech_edges_ms(phrase)
    phrase = phrase[: math.ceil(end_ms * speech.RATE_HZ / 1000)]
    scene = speech.Scene().pause(LEAD_MS)
    scene.add_speech(phrase, first).pause(pause_ms).speak(rest)
    name = f"{first} ... {rest}" + (f" ({style})" if style else "")
    return Dialogue("hesitation", name, scene.pause(TAIL_MS), pause_ms=pause_ms)


PARTS = ("tuning", "held-out", "all")


def dialogues(per_kind: int | None = None, part: str = "tuning") -> list[Dialogue]:
    """The set, in a fixed order; ``per_kind`` takes only the first of each kind; ``part``:
    the part tuning looks at (the default), the held-out part, or both."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    take = slice(per_kind)
    complete: tuple[str, ...] = ()
    hesitations: tuple[tuple[str, int, str, str], ...] = ()
    if part != "held-out":
        complete, hesitations = COMPLETE, HESITATIONS
    if part != "tuning":
        complete, hesitations = complete + HELD_OUT_COMPLETE, hesitations + HELD_OUT_HESITATIONS
    out = [
        Dialogue("complete", text, speech.Scene().pause(LEAD_MS).speak(text).pause(TAIL_MS))
        for text in complete[take]
    ]
    out += [_hesitation(*hesitation) for hesitation in hesitations[take]]
    if part == "held-out":
        return out  # the overlapping kinds have no held-out part: nothing is tuned on them
    prompt = speech.Scene().pause(LEAD_MS).speak(PROMPT).pause(200)
    for kind, lines in (("backchannel", BACKCHANNELS), ("interruption", INTERRUPTIONS)):
        out += [Dialogue(kind, text, prompt, over=_over(text)) for text in lines[take]]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not speech.espeak_available():
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for index, dialogue in enumerate(dialogues(part="all")):
        signal = dialogue.before.signal
        if dialogue.over is not None:
            gap = speech.silence(2000)  # where the reply would be
            signal = np.concatenate([signal, gap, dialogue.over.signal])
        speech.write_wav(out / f"{index:02d}-{dialogue.kind}.wav", signal)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
