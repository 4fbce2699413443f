"""A Hugging Face tokenizer rebuilt from a GGUF file's own vocabulary, for the slime hook's chat template.

The slime generate hook loads its tokenizer with ``AutoTokenizer.from_pretrained``.  The
model of the end-to-end suite ships only as GGUF, and transformers' GGUF loader needs
torch, so the byte-level BPE is rebuilt here from the file's ``tokenizer.ggml.*`` fields
with the ``tokenizers`` library, and saved with the chat template the server uses.  The
e2e test checks the result against the server's own ``/tokenize`` on the real
conversation, so a divergence fails loudly instead of skewing tokens.
"""

from __future__ import annotations

from pathlib import Path

CONTROL_TOKEN = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL


def save_tokenizer(gguf_path: Path, chat_template: str, out_dir: Path) -> Path:
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    reader = GGUFReader(str(gguf_path))

    def field(name: str) -> object:
        return reader.fields[name].contents()

    if field("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{gguf_path}: only byte-level BPE (gpt2) vocabularies are supported")
    tokens: list[str] = list(field("tokenizer.ggml.tokens"))  # type: ignore[arg-type]
    types: list[int] = list(field("tokenizer.ggml.token_type"))  # type: ignore[arg-type]
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]  # type: ignore[union-attr]
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    # llama.cpp's "smollm" pre-tokenizer: single digits, then GPT-2's byte-level split.
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([t for t, kind in zip(tokens, types) if kind == CONTROL_TOKEN])
    eos = tokens[int(field("tokenizer.ggml.eos_token_id"))]  # type: ignore[call-overload]
    bos = tokens[int(field("tokenizer.ggml.bos_token_id"))]  # type: ignore[call-overload]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos, bos_token=bos, pad_token=eos)
    tokenizer.chat_template = chat_template
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
