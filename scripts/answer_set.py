"""What people say to a voice assistant: questions, commands, requests and small talk.

Each line of the set is one thing said (as its transcript: the bench sends it as text) and the
patterns a good answer must all match (regular expressions, case-insensitive; the
alternatives of one pattern are the words that will do). What a good answer is depends on
the kind (scripts/answer_rubric.py judges it):

* a **question** or **small talk** is *answered*: the answer states the fact, or answers in
  kind;
* a **command** (switch, set, turn on) or a **request** (book, call, order) is *acknowledged*:
  the engine controls no device and books nothing, so a good answer says in a short sentence
  what it understood (the patterns: the thing asked about) and that it cannot do it, or what
  to do instead.

The prompt was tuned on TUNING; HELD_OUT is scored only at the end (``--part held-out`` in
scripts/bench_answers.py), so that a gain there is not a gain learned from its lines.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("question", "command", "request", "small talk")


@dataclass(frozen=True, slots=True)
class Said:
    """One thing said to the assistant, and what its answer must mention."""

    kind: str
    text: str
    facts: tuple[str, ...]

    @property
    def expected(self) -> str:
        """The rubric's class of a good answer."""
        return "answered" if self.kind in ("question", "small talk") else "acknowledged"


def _said(kind: str, text: str, *facts: str) -> Said:
    assert kind in KINDS, kind
    return Said(kind, text, facts)


TUNING = (
    _said("question", "What is the tallest mountain in the world?", r"\beverest\b"),
    _said("question", "How many sides does a triangle have?", r"\b(3|three)\b"),
    _said("question", "What is the boiling point of water in Celsius?", r"\b(100|hundred)\b"),
    _said("question", "Who wrote Romeo and Juliet?", r"\bshakespeare\b"),
    _said("question", "What is the capital of Australia?", r"\bcanberra\b"),
    _said("question", "How many minutes are in two hours?", r"\b(120|hundred (and )?twenty)\b"),
    _said("question", "What is the opposite of hot?", r"\bcold\b"),
    _said("question", "What color are ripe bananas?", r"\byellow\b"),
    _said("command", "Turn on the living room lights.", r"\blights?\b"),
    _said("command", "Switch on the heating.", r"\bheat"),
    _said("command", "Set a timer for ten minutes.", r"\btimers?\b"),
    _said("command", "Turn the volume up.", r"\bvolume\b|\bsound\b"),
    _said("command", "Set an alarm for seven tomorrow morning.", r"\balarms?\b"),
    _said("command", "Turn off the kitchen fan.", r"\bfans?\b"),
    _said("command", "Play some jazz music.", r"\bjazz\b|\bmusic\b"),
    _said("command", "Lock the front door.", r"\bdoors?\b|\block"),
    _said(
        "request",
        "Can you book a table for two at an Italian restaurant tonight?",
        r"\btables?\b|\bbook|\brestaurant|\breserv",
    ),
    _said("request", "Please call my mom.", r"\bcall|\bphone|\bmom\b"),
    _said("request", "Order a large pizza for delivery.", r"\bpizza|\border"),
    _said(
        "request",
        "Send a message to John saying I will be late.",
        r"\bmessages?\b|\bjohn\b|\btext\b",
    ),
    _said("request", "Add milk to my shopping list.", r"\bmilk\b|\blist\b"),
    _said("request", "Book me a taxi to the airport.", r"\btaxi|\bcab\b|\bride\b"),
    _said("request", "Remind me to water the plants at six.", r"\bremind|\bplants?\b"),
    _said("small talk", "How are you today?", r"\b(good|great|fine|well|doing)\b"),
    _said("small talk", "Thank you so much!", r"\b(welcome|pleasure|glad|problem|anytime|happy)\b"),
    _said("small talk", "Good morning!", r"\b(morning|hello|hi|hey)\b"),
    _said("small talk", "What's your name?", r"\bassistant\b|\bmy name\b|\bcall me\b|\bi am\b"),
    _said(
        "small talk", "Can you help me with something?", r"\b(sure|course|happy|glad|what|how)\b"
    ),
)

# Scored only once the prompt was chosen on TUNING.
HELD_OUT = (
    _said("question", "How many wheels does a bicycle have?", r"\b(2|two)\b"),
    _said("question", "What is the largest ocean on Earth?", r"\bpacific\b"),
    _said("question", "Which planet do we live on?", r"\bearth\b"),
    _said("question", "How many days are in September?", r"\b(30|thirty)\b"),
    _said("command", "Turn off the bedroom lights.", r"\blights?\b"),
    _said(
        "command",
        "Set the thermostat to twenty degrees.",
        r"\bthermostat|\btemperature|\bdegrees?\b|\bheat",
    ),
    _said("command", "Start the dishwasher.", r"\bdishwasher"),
    _said("command", "Mute the television.", r"\btv\b|\btelevision|\bmute|\bsound\b"),
    _said(
        "request",
        "Can you reserve two seats at the cinema for tonight?",
        r"\bseats?\b|\bcinema|\btickets?\b|\breserv|\bmovie",
    ),
    _said("request", "Buy me a bus ticket to Boston.", r"\btickets?\b|\bbus\b|\bboston\b"),
    _said("request", "Schedule a meeting with Anna on Friday.", r"\bmeeting|\banna\b|\bcalendar"),
    _said(
        "small talk",
        "I'm feeling a bit tired today.",
        r"\b(rest|sleep|sorry|break|relax|easy|nap)",
    ),
    _said("small talk", "Goodbye!", r"\b(bye|goodbye|later|care|soon)\b"),
    _said("small talk", "Hello there!", r"\b(hello|hi|hey)\b"),
)


def said(part: str) -> tuple[Said, ...]:
    """The lines of one part: ``tuning``, ``held-out`` or ``all``."""
    return {"tuning": TUNING, "held-out": HELD_OUT, "all": TUNING + HELD_OUT}[part]
