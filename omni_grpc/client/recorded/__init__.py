"""A recording's files as its readers make them: ``events.jsonl`` and ``audio.wav`` from the
wire log the server wrote (:mod:`.derive`), its lines (:mod:`.part`, :mod:`.lines`), its two
tracks (:mod:`.tracks`), and the manifest both sides share (:mod:`.manifest`)."""
