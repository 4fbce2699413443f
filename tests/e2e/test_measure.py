"""The prefix-cache bound of the e2e report (``measure.cache_share_bound``), on hand-made traces.

Runs in ``make test`` (no model, no server).
"""

from __future__ import annotations

import json
from pathlib import Path

from e2e.measure import cache_share_bound


def _trace(run: Path, name: str, turns: list[tuple[int, int, str]], *, cancelled: bool = False) -> None:
    """An episode's trace: per turn (prompt tokens, completion tokens, the action's query or clicked value)."""
    steps = [{"output": {"prompt_tokens": prompt, "completion_tokens": completion, "text": None,
                         "tool_calls": [{"name": "click", "arguments": json.dumps({"value": action})}]}}
             for prompt, completion, action in turns]
    path = run / "step-1" / "traces" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"steps": steps, "cancelled": cancelled}))


def test_siblings_share_every_prompt_their_same_actions_led_to(tmp_path: Path) -> None:
    # two siblings: the same first click, then different ones; the second sibling's third prompt is the page its
    # second click led to (110 new tokens), its first two prompts are the first sibling's
    _trace(tmp_path, "g0000-s00", [(300, 30, "p1"), (1300, 40, "size=s"), (1500, 30, "buy now")])
    _trace(tmp_path, "g0000-s01", [(300, 30, "p1"), (1300, 40, "size=m"), (1450, 30, "buy now")])
    bound = cache_share_bound(tmp_path)
    total = 300 + 1300 + 1500 + 300 + 1300 + 1450
    new = 300 + (1300 - 300 - 30) + (1500 - 1300 - 40) + (1450 - 1300 - 40)  # each distinct prefix read once
    assert bound["prompt_tokens_in_traces"] == total and bound["prompt_tokens_reusable"] == total - new
    assert bound["prompt_cache_share_bound"] == round(1 - new / total, 3)
    # sharing only the first prompt: each episode's last prompt less its replies, less the first prompt once
    own = (1500 - 70) + (1450 - 70) - 300
    assert bound["prompt_cache_share_bound_own_path"] == round(1 - own / total, 3)


def test_every_group_shares_the_system_turn_and_a_cancelled_episodes_turns_count(tmp_path: Path) -> None:
    _trace(tmp_path, "g0000-s00", [(300, 30, "p1")])
    _trace(tmp_path, "g0001-s00", [(320, 30, "p2"), (1200, 30, "p3")], cancelled=True)
    bound = cache_share_bound(tmp_path, header_tokens=200)
    new = 300 + (320 - 200) + (1200 - 320 - 30)
    assert bound["prompt_tokens_reusable"] == 300 + 320 + 1200 - new


def test_no_turn_no_bound(tmp_path: Path) -> None:
    assert cache_share_bound(tmp_path)["prompt_cache_share_bound"] is None
