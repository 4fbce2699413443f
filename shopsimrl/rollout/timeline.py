"""The wave-timeline picture of one step: when each group was submitted, when it finished, and its fate.

Drawn from the step's events (``wave`` / ``decision`` / ``abort``, the schema of
``events.jsonl``; the simulator emits the same), so a picture can be redrawn from
any run folder.  matplotlib is imported here, lazily, and the PNG is written
atomically.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shopsimrl.io import atomic_write_bytes

#: Colour of each fate (colour-blind-safe Okabe-Ito palette).
FATE_COLOURS = {
    "accepted": "#009E73",
    "fallback": "#E69F00",
    "dropped_zero_std": "#CC79A7",
    "dropped_technical": "#D55E00",
    "surplus": "#0072B2",
    "aborted": "#BBBBBB",
}
FATE_LABELS = {
    "accepted": "accepted (spread)",
    "fallback": "fallback (zero-std kept)",
    "dropped_zero_std": "dropped: zero-std",
    "dropped_technical": "dropped: technical",
    "surplus": "surplus",
    "aborted": "aborted",
}


def timeline_rows(events: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[float], float | None]:
    """(one row per group: index, submitted, finished, fate), wave submission times, abort time."""
    submitted: dict[int, float] = {}
    rows: dict[int, dict[str, Any]] = {}
    wave_times: list[float] = []
    abort_t: float | None = None
    for e in events:
        kind = e.get("event")
        if kind == "wave":
            wave_times.append(float(e["t"]))
            for i in range(int(e["first_index"]), int(e["last_index"]) + 1):
                submitted[i] = float(e["t"])
        elif kind == "decision":
            fate = e["decision"]
            if fate == "dropped":
                fate = "dropped_technical" if e.get("verdict") == "technical" else "dropped_zero_std"
            rows[int(e["index"])] = {"index": int(e["index"]), "finished": float(e["t"]), "fate": fate}
        elif kind == "abort":
            abort_t = float(e["t"])
            for i in e.get("aborted", []):
                rows[int(i)] = {"index": int(i), "finished": abort_t, "fate": "aborted"}
    out = []
    for i in sorted(submitted):
        row = rows.get(i, {"index": i, "finished": abort_t if abort_t is not None else submitted[i], "fate": "aborted"})
        out.append({**row, "submitted": submitted[i]})
    return out, wave_times, abort_t


def draw_wave_timeline(ax: Any, events: Iterable[Mapping[str, Any]], *, title: str | None = None) -> None:
    """Draw one step's timeline on a matplotlib ``Axes``."""
    # matplotlib: loaded only when a timeline is drawn
    from matplotlib.patches import Patch

    rows, wave_times, abort_t = timeline_rows(list(events))
    for row in rows:
        left, width = row["submitted"], max(row["finished"] - row["submitted"], 0.0)
        ax.barh(row["index"], width, left=left, height=0.8, color=FATE_COLOURS[row["fate"]],
                hatch="//" if row["fate"] == "aborted" else None, edgecolor="white", linewidth=0.3)
    for t in sorted(set(wave_times)):
        ax.axvline(t, color="#444444", linewidth=0.8, linestyle=":")
    if abort_t is not None:
        ax.axvline(abort_t, color="#D55E00", linewidth=1.2)
        ax.annotate("abort", (abort_t, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", color="#D55E00", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the step started")
    ax.set_ylabel("group (submission order)")
    kept = sum(1 for r in rows if r["fate"] in ("accepted", "fallback"))
    fallback = sum(1 for r in rows if r["fate"] == "fallback")
    ax.set_title(f"{title or 'wave timeline'}: {len(rows)} groups submitted in {len(set(wave_times))} "
                 f"waves/refills, {kept} kept ({fallback} by the fallback)", fontsize=10)
    present = {r["fate"] for r in rows}
    handles = [Patch(color=c, label=FATE_LABELS[f]) for f, c in FATE_COLOURS.items() if f in present]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=len(handles), fontsize=7,
              frameon=False)


def render_png(draw: Any, *, size: tuple[float, float], dpi: int = 110) -> bytes:
    """Render ``draw(figure)`` to PNG bytes without pyplot's global state."""
    # matplotlib: loaded only when a timeline is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def write_wave_timeline(path: str | Path, events: Iterable[Mapping[str, Any]], *, title: str | None = None) -> Path:
    """Draw one step's timeline to ``path`` (PNG, written atomically)."""
    events = list(events)
    rows, _, _ = timeline_rows(events)
    height = min(12.0, 2.4 + 0.12 * len(rows))
    png = render_png(lambda fig: draw_wave_timeline(fig.add_subplot(), events, title=title), size=(9.0, height))
    return atomic_write_bytes(path, png)
