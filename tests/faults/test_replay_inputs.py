"""``shopsimrl replay`` refuses malformed supplies with exit 2 and a message naming the file and the item."""

from __future__ import annotations

import pytest

from shopsimrl.cli import main


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("flat.json", "[1, 2, 3]", "item 0 must be a [verdict, duration] pair"),
        ("short.json", '[["varied"]]', "item 0 must be a [verdict, duration] pair"),
        ("null.json", '[["varied", null]]', "item 0: the duration must be a number of seconds"),
        ("verdict.json", "[[3, 1.0]]", "item 0: the verdict must be a string"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("broken.json", "[[", "not valid JSON"),
        ("object.json", "{}", "expected a JSON list"),
        ("row.csv", "verdict,duration\nvaried,1\nvaried\n", "line 3 needs both a verdict and a duration"),
        ("text.csv", "verdict,duration\nvaried,soon\n", "line 2: the duration must be a number of seconds"),
    ],
)
def test_a_malformed_supply_exits_2_with_a_message(tmp_path, capsys, name, text, says):
    supply = tmp_path / name
    supply.write_text(text, encoding="utf-8")
    assert main(["replay", str(supply)]) == 2
    err = capsys.readouterr().err  # errors go to stderr, one line
    assert says in " ".join(err.split()) and "Traceback" not in err
