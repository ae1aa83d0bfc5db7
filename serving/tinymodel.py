"""Generate a tiny Llama model and tokenizer, deterministically, with no download.

The embedded default serves this model: a byte-level BPE tokenizer trained on
local text (the Python standard library's sources of the image it runs in) and
a small LlamaForCausalLM initialised from a fixed seed.  Its output is
gibberish; everything around it (weights on disk, tokenizer, engine, HTTP API)
is real.  Two generations in the same image give the same sha256 for every
file; the sums are written to SHA256SUMS beside the model.

This file runs inside the runtime image (which has torch, transformers and
tokenizers) and so imports nothing from the rest of the project.

usage: python3 tinymodel.py OUT_DIR [--seed N] [--vocab-size N] ...
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import sysconfig
from pathlib import Path

# Single-threaded, so that training and initialisation do not depend on scheduling.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]


def corpus_files(limit_bytes: int) -> list[Path]:
    """The standard library's top-level modules, in name order, up to limit_bytes."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    picked: list[Path] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        size = path.stat().st_size
        if total + size > limit_bytes:
            break
        picked.append(path)
        total += size
    if not picked:
        raise SystemExit(f"tinymodel: no training text found under {stdlib}")
    return picked


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def generate(
    out: Path,
    seed: int,
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    max_positions: int,
    corpus_bytes: int,
) -> dict[str, str]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(p) for p in corpus_files(corpus_bytes)], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=max_positions,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)

    for path in out.iterdir():
        # Readable by the unprivileged serving user; safetensors writes 0600.
        path.chmod(0o644)
    sums = {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.is_file() and p.name != "SHA256SUMS"}
    (out / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
    return sums


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="directory to write the model into")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--corpus-bytes", type=int, default=4 << 20)
    a = ap.parse_args(argv)
    sums = generate(
        a.out,
        a.seed,
        a.vocab_size,
        a.hidden,
        a.layers,
        a.heads,
        a.kv_heads,
        a.intermediate,
        a.max_positions,
        a.corpus_bytes,
    )
    for name, digest in sums.items():
        print(f"{digest}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
