"""The model runtimes the embedded engine hears, thinks and speaks with, on the CPU.

Each loads a model that ships in a pip package (or, for espeak-ng, the OS) and runs it; none
knows a session, a turn or the wire. :mod:`.asr` is Whisper through CTranslate2 (its files
found and checked by :mod:`.whisper_models`), :mod:`.lm` SmolLM2 in NumPy (read from GGUF by
:mod:`.gguf_file`), :mod:`.rescoring` Whisper's readings re-ranked by SmolLM2, and
:mod:`.piper_voice` the neural voice, with its phonemes from espeak-ng (:mod:`.phonemes`).
Silero's voice activity detection is the engine kit's (:mod:`omni_grpc.engine.kit.vad`: every
engine with server VAD hears with it). The engine's own logic (turns judged by SmolLM2,
responses, function calls) is the package above, which loads these once (:mod:`..runtime`)
and shares them between sessions.
"""
