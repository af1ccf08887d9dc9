#!/usr/bin/env python3
"""Builds tiny random-weight models for the vLLM test tier, offline, and prints their paths.

    .venv-vllm/bin/python scripts/make_tiny_models.py [--out DIR] [--force] [NAME ...]

Nothing is downloaded: the tokenizer is trained here on a few sentences, the weights are
drawn from a fixed seed, and the configuration is written from code. The result is a real
Hugging Face checkpoint (config, tokenizer, processor, safetensors) that vLLM loads like any
other, small enough (a few MB) to build in seconds at test time. Models are cached under
``build/tiny-models`` (git-ignored); a stamp over this file rebuilds them when it changes.

Models:

* ``qwen2-audio``: Qwen2-Audio (a Whisper-style audio encoder feeding a Qwen2 decoder), the
  audio-in, text-out architecture the ``vllm`` engine serves. Its weights are drawn with a
  large spread (std 0.25) so that different audio gives different tokens, which lets the
  tests see that audio really reaches the model.

Needs torch, transformers and tokenizers (the ``.venv-vllm`` environment has them).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "build" / "tiny-models"
STAMP = ".omni-tiny-model.sha256"

# Text the tokenizer learns its merges from: enough to give sub-word pieces. Its alphabet is
# printable ASCII and nothing else, so that any token a random model picks decodes to
# readable text (which espeak-ng can say) and any ASCII prompt can be encoded.
_CORPUS = (
    (
        "the quick brown fox jumps over the lazy dog. hello world, this is a tiny speech model. "
        "audio streams in and words stream out. can you hear me now? yes, i can hear you. "
    )
    * 40
    + "".join(chr(c) for c in range(32, 127))
    + "\n"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
AUDIO_TOKENS = {
    "audio_token": "<|AUDIO|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}


def _stamp() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _tokenizer(extra_special: dict[str, str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    transformers = importlib.import_module("transformers")

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS + list(extra_special.values()),
        show_progress=False,
    )
    bpe.train_from_iterator([_CORPUS], trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=extra_special,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_qwen2_audio(out: Path) -> None:
    """A 0.4 M-parameter Qwen2-Audio: 2 encoder and 2 decoder layers of width 64."""
    # Imported by name: the models' libraries live in .venv-vllm only.
    safetensors_torch = importlib.import_module("safetensors.torch")
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")

    tokenizer = _tokenizer(AUDIO_TOKENS)
    processor = transformers.Qwen2AudioProcessor(
        feature_extractor=transformers.WhisperFeatureExtractor(feature_size=128),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")]
    config = transformers.Qwen2AudioConfig(
        audio_config={
            "model_type": "qwen2_audio_encoder",
            "d_model": 64,
            "encoder_layers": 2,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 128,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
            "init_std": 0.25,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            # vLLM's CPU attention takes head sizes 32, 64, 80, 96, ...
            "head_dim": 32,
            "max_position_embeddings": 4096,
            "initializer_range": 0.25,
            "eos_token_id": eos[0],
            "pad_token_id": tokenizer.pad_token_id,
        },
        audio_token_index=tokenizer.convert_tokens_to_ids(AUDIO_TOKENS["audio_token"]),
    )
    torch.manual_seed(0)
    transformers.Qwen2AudioForConditionalGeneration(config).save_pretrained(out)
    transformers.GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(out)
    # transformers 5 nests the decoder one level deeper than the original checkpoints, and
    # vLLM loads the original layout: language_model.model.* rather than .model.model.*.
    weights = out / "model.safetensors"
    tensors = safetensors_torch.load_file(weights)
    renamed = {
        key.replace("language_model.model.model.", "language_model.model."): value
        for key, value in tensors.items()
    }
    safetensors_torch.save_file(renamed, weights, metadata={"format": "pt"})


BUILDERS: dict[str, Callable[[Path], None]] = {"qwen2-audio": build_qwen2_audio}


def ensure(name: str, out_root: Path = DEFAULT_OUT, *, force: bool = False) -> Path:
    """The directory of model ``name``, built unless a current build is there."""
    if name not in BUILDERS:
        raise ValueError(f"unknown tiny model {name!r}; known: {', '.join(BUILDERS)}")
    out = out_root / name
    stamp = out / STAMP
    if not force and stamp.is_file() and stamp.read_text() == _stamp():
        return out
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    BUILDERS[name](out)
    stamp.write_text(_stamp())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(BUILDERS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="cache directory")
    parser.add_argument("--force", action="store_true", help="rebuild even if current")
    args = parser.parse_args(argv)
    try:
        for name in args.names or list(BUILDERS):
            print(ensure(name, args.out, force=args.force))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["BUILDERS", "DEFAULT_OUT", "ensure"]
