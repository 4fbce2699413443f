"""The files a slime run reads, made small: prompt data, an eval set, and an HF checkpoint directory (tokenizer + config)."""

from __future__ import annotations

from pathlib import Path

from shopsimrl.io import atomic_write_json, atomic_write_jsonl

#: The HF config the checkpoint directory declares (slime's parser reads it and compares rope_theta).
ROPE_THETA = 1000000.0
#: Passed with the launcher's argv, as the model's MODEL_ARGS are.
MODEL_ARGS = ["--num-layers", "2", "--hidden-size", "64", "--ffn-hidden-size", "128", "--num-attention-heads", "4",
              "--untie-embeddings-and-output-weights", "--rotary-base", str(int(ROPE_THETA))]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: The eval set's name in slime's --eval-prompt-data (the eval metric keys carry it).
EVAL_DATASET = "shopsim_val"


def task_ids(count: int, prefix: str = "task") -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(count)]


def write_prompts(path: Path, ids: list[str]) -> Path:
    """JSONL as ``shopsimrl data export`` writes it: the task id as the prompt and in the metadata."""
    return atomic_write_jsonl(path, ({"prompt": t, "metadata": {"task_id": t}} for t in ids))


def write_checkpoint_dir(path: Path, corpus: list[str] | None = None) -> Path:
    """A byte-level BPE tokenizer (Qwen's special tokens and tool tags, a chat template) and a small Qwen2 config.

    Byte-level, so every text round-trips through encode/decode, as the generate hook needs.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(
        list(corpus or ["search for red hiking boots", '{"name": "search", "arguments": {"query": "boots"}}']),
        trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                            show_progress=False),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL[1:])
    tokenizer.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"])
    tokenizer.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    tokenizer.save_pretrained(path)
    atomic_write_json(path / "config.json", {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": len(tokenizer),
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rope_theta": ROPE_THETA, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    })
    return path
