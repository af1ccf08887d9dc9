"""The rubric a voice assistant's answer is judged by: answered, acknowledged, parroted,
refused or missed.

Deterministic, on the words alone, in this order (the first that holds is the class):

1. **refused**: the answer describes the assistant as a text-based thing or an AI ("as a
   text-based AI", "I'm just a language model"): a voice assistant never says so;
2. a question or small talk is **answered** when every pattern of its line matches (a
   question's are words it does not hold, so "The capital of Australia is Canberra." added
   one; a greeting's hold its own, as "Good morning!" is answered in kind);
3. **parroted**: the answer mostly repeats what was said: of its words (fillers such as "okay"
   left out, "turning" read as "turn"), at least :data:`PARROT_SHARE` are words of the request;
4. a command or request is **acknowledged** when the answer names what was asked (the line's
   patterns), says that it understood or cannot do it or what to do instead, and is short (at
   most :data:`ACK_MAX_WORDS` words);
5. otherwise **refused** if it says it cannot ("I'm unable to", "I can't") without either,
   else **missed** (it answered something else).

What it cannot judge: whether an answer is true beyond its expected words, and whether
"Sure, here is some jazz" claims what the engine cannot do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from answer_set import Said

CLASSES = ("answered", "acknowledged", "parroted", "refused", "missed")
PARROT_SHARE = 0.75
ACK_MAX_WORDS = 30

_SELF_DESCRIBED = re.compile(
    r"text[- ]based|\bas an? (ai|artificial|language|computer|digital)\b|\blanguage model\b"
    r"|\bi(?:'m| am) (just |only )?an? (ai|artificial intelligence|computer program|chat ?bot"
    r"|bot|machine)\b|\bchat ?bot\b|\bai (language )?model\b",
    re.IGNORECASE,
)
_CANNOT = re.compile(
    r"\bcan'?t\b|\bcannot\b|\bcan not\b|\bunable\b|\bnot able\b|\bwon'?t be able\b"
    r"|\b(don'?t|do not) have (the )?(ability|access|a way)\b|\bnot possible\b",
    re.IGNORECASE,
)
_UNDERSTOOD = re.compile(
    r"\b(ok|okay|sure|alright|all right|got it|of course|certainly|will do|noted|understood"
    r"|no problem)\b|\byou can\b|\btry\b|\buse\b",
    re.IGNORECASE,
)
_FILLERS = frozenset(("ok", "okay", "sure", "alright", "yes", "please", "now", "right", "well"))


def words(text: str) -> list[str]:
    """The words of ``text``, lower case, apostrophes kept ("can't")."""
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower().replace("\u2019", "'"))


def _stem(word: str) -> str:
    """A crude stem, enough to read "turning" and "lights" as "turn" and "light"."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def parrots(request: str, answer: str) -> bool:
    """Whether ``answer`` mostly repeats ``request``'s words."""
    asked = [_stem(w) for w in words(request)]
    said = [_stem(w) for w in words(answer) if w not in _FILLERS]
    if not said:
        return False
    return sum(w in asked for w in said) / len(said) >= PARROT_SHARE


def _mentions(line: Said, answer: str) -> bool:
    return all(re.search(fact, answer, re.IGNORECASE) for fact in line.facts)


def classify(line: Said, answer: str) -> str:
    """The rubric's class of ``answer`` to ``line``: one of :data:`CLASSES`."""
    answer = answer.replace("\u2019", "'")
    if _SELF_DESCRIBED.search(answer):
        return "refused"
    if line.expected == "answered" and _mentions(line, answer):
        return "answered"
    if parrots(line.text, answer):
        return "parroted"
    if (
        line.expected == "acknowledged"
        and _mentions(line, answer)
        and (_UNDERSTOOD.search(answer) or _CANNOT.search(answer))
        and len(words(answer)) <= ACK_MAX_WORDS
    ):
        return "acknowledged"
    return "refused" if _CANNOT.search(answer) else "missed"


@dataclass(frozen=True, slots=True)
class Judged:
    """One line's answer, its class, and how long it took."""

    line: Said
    answer: str
    verdict: str
    first_text_ms: float
    total_ms: float

    @property
    def good(self) -> bool:
        return self.verdict == self.line.expected
