"""The contract's numeric bounds: the largest values its scalar fields and free-form objects hold.

A JSON client can write any number and nest objects as deep as it likes; the contract cannot
carry all of that. ``uint32``/``uint64`` fields overflow, a ``google.protobuf.Duration`` spans
about ±10,000 years, and a ``google.protobuf.Struct`` nested past about 32 levels no longer
parses (each level costs three messages against the decoder's limit of 100). The bridge refuses
such values as it reads a client event, and the core refuses them in a command a gRPC client
built itself, both with these numbers.
"""

from __future__ import annotations

UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
# google.protobuf.Duration's documented range: ±315,576,000,000 seconds, nanos within a second.
MAX_DURATION_S = 315_576_000_000
MAX_DURATION_NANOS = 999_999_999
# A free-form object (``engine_options``): at most this many levels of
# objects and lists (the top object is level 1), well inside what the decoder takes, and at most
# this many values in all, so that copying one into a Struct stays cheap.
MAX_STRUCT_DEPTH = 16
MAX_STRUCT_VALUES = 4096
# A response's ``metadata`` (string to string): OpenAI's bounds, at most this many pairs, and
# keys and values of at most this many characters, so a label map stays a label map.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
# Function tools (``SessionConfig.tools``, ``CreateResponse.tools``) and the items of a call:
# OpenAI's 128 tools and its name pattern; a schema, a description, the arguments a model writes
# and the output a client returns each bounded so that a prompt built from them stays a prompt.
MAX_TOOLS = 128
MAX_TOOL_NAME_CHARS = 64
MAX_TOOL_DESCRIPTION_CHARS = 8192
MAX_TOOL_SCHEMA_CHARS = 65536
MAX_FUNCTION_ARGUMENTS_CHARS = 65536
MAX_FUNCTION_OUTPUT_CHARS = 262144
MAX_CALL_ID_CHARS = 128
# A response's own input (``CreateResponse.input``) and options: at most this many entries (an
# item or a reference each), the 4096 tokens OpenAI lets a response cap itself at, and a voice's
# name as long as a tool's.
MAX_RESPONSE_INPUT_ENTRIES = 64
MAX_RESPONSE_OUTPUT_TOKENS = 4096
MAX_VOICE_CHARS = 64
# A truncation's post-instructions token limit (``Truncation.post_instructions_token_limit``):
# past any model's context today, and small enough that a count of tokens never overflows.
MAX_POST_INSTRUCTIONS_TOKENS = 1_048_576
# Out-of-band responses one session runs at a time (Capabilities says it).
MAX_OUT_OF_BAND_RESPONSES = 4
# What an error echoes of the command it refuses: an ``event_id`` up to this long (a longer one
# is the client's payload, not an id: echoed, it would make every refusal as large as the
# message it answers), and this much of any other client text it quotes (an unknown ``type``).
MAX_ECHOED_EVENT_ID_CHARS = 512
MAX_QUOTED_CHARS = 64


def echoed_event_id(event_id: str) -> str:
    """``event_id`` as an error may echo it: whole, or nothing when it is past the bound."""
    return event_id if len(event_id) <= MAX_ECHOED_EVENT_ID_CHARS else ""


def quoted(text: str) -> str:
    """Client text as an error message may quote it: ``repr`` of at most
    :data:`MAX_QUOTED_CHARS` characters of it, marked when cut."""
    if len(text) <= MAX_QUOTED_CHARS:
        return repr(text)
    return f"{text[:MAX_QUOTED_CHARS]!r}... ({len(text)} characters)"
