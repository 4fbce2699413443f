"""What a Qwen-style model writes, for the hook tests: the fake shop's winning replies, and the model's turns in a loss mask.

The scripted SGLang that answers with these is ``shopsimrl.slime.harness.scripted_sglang``
(the one ``shopsimrl slime check`` uses).
"""

from __future__ import annotations

from collections.abc import Sequence

from shopsimrl.slime.harness.scripted_sglang import tool_call

#: The model's four replies that buy the fake shop's goal product (tests/agent/fakes.py), as text.
WINNING = [tool_call("search", query="red hiking boots"), tool_call("click", value="p1"),
           tool_call("click", value="size=9"), tool_call("click", value="buy now")]


def loss_mask_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous runs of loss-mask-1 positions in a response: one per model turn."""
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans
