"""The controller's state diagram, drawn from its protocol table (:data:`controller.TRANSITIONS`).

Nothing here is written by hand: the Mermaid diagram and the table of allowed operations
are rendered from the same mapping the controller checks every call against, so the picture
in ``docs/sampling.md`` changes when the protocol does (``scripts/state_diagram.py`` writes it,
a test compares it with the committed page).
"""

from __future__ import annotations

from shopsimrl.sampling.controller import INITIAL_STATE, OPERATIONS, TRANSITIONS, State


def mermaid() -> str:
    """A Mermaid ``stateDiagram-v2``: one arrow per (from, to) pair, labelled with the operations that take it."""
    lines = ["stateDiagram-v2", f"    [*] --> {INITIAL_STATE}"]
    for state in State:
        ops = TRANSITIONS[state]
        for target in State:
            labels = [op for op in OPERATIONS if target in ops.get(op, ())]
            if labels:
                lines.append(f"    {state} --> {target}: {', '.join(f'{op}()' for op in labels)}")
        if set(ops) == {"abort"}:  # only the idempotent abort is left: the step is over
            lines.append(f"    {state} --> [*]")
    return "\n".join(lines) + "\n"


def allowed_table() -> str:
    """A Markdown table: for each state, each operation either allowed (with the states it leads to) or refused."""
    header = "| state | " + " | ".join(f"`{op}()`" for op in OPERATIONS) + " |"
    rows = [header, "|---" * (len(OPERATIONS) + 1) + "|"]
    for state in State:
        cells = []
        for op in OPERATIONS:
            targets = TRANSITIONS[state].get(op)
            cells.append("refused" if targets is None else "→ " + ", ".join(str(t) for t in State if t in targets))
        rows.append(f"| `{state}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def markdown() -> str:
    """The generated block of ``docs/sampling.md``: the diagram, then the table."""
    return f"```mermaid\n{mermaid()}```\n\n{allowed_table()}"
