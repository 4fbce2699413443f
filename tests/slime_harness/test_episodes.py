"""Our real generate hook inside slime's real ``generate_and_rm_group``, against a scripted SGLang and a
real env server, with slime's ``abort()`` mid-episode (``shopsimrl.slime.harness.episodes``).

Before the abort watch's fix, its poller task was still pending on slime's loop after the
last episode ended (a loop closed then reports "Task was destroyed but it is pending!").
"""

from __future__ import annotations


def test_the_real_hook_in_slimes_group_and_abort(slime_src, tmp_path):
    from shopsimrl.slime.harness.episodes import run_episodes

    result = run_episodes(slime_src, tmp_path)
    assert result["status"] == 0 and result["problems"] == [], result["problems"]
    assert len(result["whole"]) == 4 and all(status.endswith("COMPLETED") for _, status, _, _ in result["whole"])
    assert result["abort"]["calls_at_abort"] == result["abort"]["calls_after"]  # no /generate after the abort
    assert result["env_leased_after"] == 0
