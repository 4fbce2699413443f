"""The files a slime run reads, made small: prompt data, an eval set, and an HF checkpoint directory (tokenizer + config)."""

from __future__ import annotations

import json
from pathlib import Path

from shopsimrl.io import atomic_write_json

#: The HF config the checkpoint directory declares (slime's parser reads it and compares rope_theta).
ROPE_THETA = 1000000.0
#: Passed with the launcher's argv, as the model's MODEL_ARGS are.
MODEL_ARGS = ["--num-layers", "2", "--hidden-size", "64", "--ffn-hidden-size", "128", "--num-attention-heads", "4",
              "--untie-embeddings-and-output-weights", "--rotary-base", str(int(ROPE_THETA))]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def task_ids(count: int, prefix: str = "task") -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(count)]


def write_prompts(path: Path, ids: list[str]) -> Path:
    """JSONL as ``shopsimrl data export`` writes it: the task id as the prompt and in the metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": t, "metadata": {"task_id": t}}) + "\n" for t in ids), encoding="utf-8")
    return path


def write_checkpoint_dir(path: Path, words: list[str] | None = None) -> Path:
    """A tokenizer (word-level, Qwen's special tokens, a chat template) and a small Qwen2 config."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate([*SPECIAL, "[UNK]", *(words or [])])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        unk_token="[UNK]")
    tokenizer.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    tokenizer.save_pretrained(path)
    atomic_write_json(path / "config.json", {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": max(len(vocab), 8),
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rope_theta": ROPE_THETA, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    })
    return path
