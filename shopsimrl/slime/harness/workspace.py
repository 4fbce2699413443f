"""The files a slime run reads, made small: prompt data, an eval set, and an HF checkpoint directory (tokenizer + config).

The tokenizer is also the hook tests' (``tests/slime_hooks``): one builder for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shopsimrl.io import atomic_write_json, atomic_write_jsonl

#: The HF config the checkpoint directory declares (slime's parser reads it and compares rope_theta).
ROPE_THETA = 1000000.0
#: Passed with the launcher's argv, as the model's MODEL_ARGS are.
MODEL_ARGS = ["--num-layers", "2", "--hidden-size", "64", "--ffn-hidden-size", "128", "--num-attention-heads", "4",
              "--untie-embeddings-and-output-weights", "--rotary-base", str(int(ROPE_THETA))]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
#: A minimal chat template (role headers, no tool rendering), for runs and tests that only need a tokenizer.
PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: The eval set's name in slime's --eval-prompt-data (the eval metric keys carry it).
EVAL_DATASET = "shopsim_val"


def task_ids(count: int, prefix: str = "task") -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(count)]


def write_prompts(path: Path, ids: list[str]) -> Path:
    """JSONL as ``shopsimrl data export`` writes it: the task id as the prompt and in the metadata, with an
    instruction and a category (the ``forecast`` rule reads them; our data source takes the category as the
    prompts' cluster label, as with a user's prompt file).  The loop legs' world
    (:func:`~shopsimrl.slime.harness.world.pass_rate`) is one where the instruction's wording says whether a task
    is never solved, always solved, or in between, as a ShopSim instruction's wording reflects its goal."""
    from shopsimrl.slime.harness.world import pass_rate  # the world the loop legs' episodes are drawn from

    def metadata(task_id: str) -> dict[str, str]:
        rate = pass_rate(task_id)
        word = "rare" if rate == 0.0 else "plain" if rate == 1.0 else "usual"
        return {"task_id": task_id, "instruction": f"Find me the {word} item {task_id[-1]}",
                "category": f"shelf-{task_id[-2]}"}

    return atomic_write_jsonl(path, ({"prompt": t, "metadata": metadata(t)} for t in ids))


def write_tokenizer(path: Path, corpus: Sequence[str], chat_template: str = PLAIN_CHAT_TEMPLATE,
                    vocab_size: int = 800) -> Path:
    """A byte-level BPE tokenizer with Qwen's special tokens and tool tags and ``chat_template``, saved as a checkpoint's.

    Byte-level, so every text round-trips through encode/decode, as the generate hook needs.
    """
    # tokenizers and transformers take seconds to load: only when a tokenizer is written
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(
        list(corpus),
        trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                            show_progress=False),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL[1:])
    tokenizer.add_tokens(ADDED)
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(path)
    return path


def write_checkpoint_dir(path: Path, corpus: Sequence[str] | None = None) -> Path:
    """An HF checkpoint directory as slime reads it: :func:`write_tokenizer` and a small Qwen2 config."""
    from transformers import AutoTokenizer  # seconds to load: only when a checkpoint is written

    write_tokenizer(path, corpus or ["search for red hiking boots", '{"name": "search", "arguments": {"query": "boots"}}'],
                    vocab_size=600)
    atomic_write_json(path / "config.json", {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": len(AutoTokenizer.from_pretrained(path)),
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rope_theta": ROPE_THETA, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    })
    return path
