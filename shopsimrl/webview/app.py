"""The web app: five kinds of page over the served folder, read-only, every string escaped.

Runs, a run (charts, other runs overlaid), a step (its groups and wave timeline), an episode (its trace as a
conversation), a prompt (its groups across the run).  Only GET; files come through
:class:`~shopsimrl.webview.folder.Folder` (inside the folder, no symlink, bounded).  A damaged or hostile
run folder gives its page a one-line error (404 for what does not exist or leaves the folder, 422 for a file
that cannot be read); a bug gives a one-line 500 page, its traceback on the server's terminal only.
The templates escape everything (jinja2 autoescape); plotly.js is served from the installed ``plotly``
package, so the pages need no network.
"""

from __future__ import annotations

import logging
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import jinja2
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from shopsimrl.io import BadFileError, printable
from shopsimrl.webview.charts import charts
from shopsimrl.webview.episode import check_trace_name, read_episode, siblings, trace_path
from shopsimrl.webview.folder import Folder, OutsideError, held_locks
from shopsimrl.webview.groups import FAILED, VERDICTS, group_record, prompt_groups, step_groups
from shopsimrl.webview.runs import summarize
from shopsimrl.webview.skips import SKIPPING_RULE, skips

TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
STATIC = {"view.js": "text/javascript", "view.css": "text/css"}
REFRESH_SECONDS = 5  # how often a page of a running run asks again
MAX_OVERLAID = 12
log = logging.getLogger("shopsimrl.view")


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("shopsimrl.webview", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda v, digits=3: "–" if v is None else f"{v:.{digits}f}"
    env.globals.update(refresh=REFRESH_SECONDS, verdicts=VERDICTS, failed=FAILED)
    return env


def _plotly_js() -> bytes:
    """plotly.js as the installed plotly package ships it (``plotly/package_data/plotly.min.js``)."""
    return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


def create_app(root: Path) -> FastAPI:
    folder = Folder(root)
    env = _templates()
    for name in env.list_templates():  # compiled now, not on each page's first request
        env.get_template(name)
    app = FastAPI(title="shopsimrl view", docs_url=None, redoc_url=None, openapi_url=None)
    scripts: dict[str, bytes] = {}

    def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(folder=printable(folder.root), **context),
                            status_code=status)

    @app.exception_handler(BadFileError)
    async def unreadable(request: Request, exc: BadFileError) -> HTMLResponse:
        status = 404 if isinstance(exc, OutsideError) else 422
        return page("error.html", status, message=printable(str(exc), limit=2000), path=printable(request.url.path))

    @app.exception_handler(HTTPException)
    async def not_here(request: Request, exc: HTTPException) -> HTMLResponse:
        return page("error.html", exc.status_code, message=printable(exc.detail, limit=200),
                    path=printable(request.url.path))

    @app.exception_handler(RequestValidationError)
    async def not_a_page(request: Request, exc: RequestValidationError) -> HTMLResponse:
        return page("error.html", 404, message="no such page (a step, group or sibling is a number)",
                    path=printable(request.url.path))

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> HTMLResponse:
        log.exception("shopsimrl view: %s", request.url.path)
        return page("error.html", 500, message=f"the viewer failed on this page ({type(exc).__name__}); the server's "
                    f"terminal has the details", path=printable(request.url.path))

    @app.get("/", response_class=HTMLResponse)
    def runs_page() -> HTMLResponse:
        return page("runs.html", runs=_summaries(folder))

    @app.get("/runs/table", response_class=HTMLResponse)
    def runs_table() -> HTMLResponse:
        return page("runs_table.html", runs=_summaries(folder))

    @app.get("/run/{name}", response_class=HTMLResponse)
    def run_page(name: str, overlay: Annotated[list[str] | None, Query(alias="with")] = None) -> HTMLResponse:
        summary = summarize(folder, name, held_locks())
        if summary.state == "unreadable":
            folder.run(name)  # a name that is not a run's: 404; else the run's own error below
        others = [n for n in folder.run_names() if n != name]
        chosen = [n for n in overlay or [] if n in others][:MAX_OVERLAID]
        steps = folder.steps(folder.run(name)) if summary.state != "unreadable" else []
        return page("run.html", run=summary, steps=steps, others=others, chosen=chosen, names=[name, *chosen])

    @app.get("/api/charts")
    def chart_data(run: Annotated[list[str] | None, Query()] = None) -> JSONResponse:
        return JSONResponse(charts(folder, (run or [])[:MAX_OVERLAID + 1]))

    @app.get("/run/{name}/step/{step}", response_class=HTMLResponse)
    def step_page(name: str, step: int) -> HTMLResponse:
        run = folder.run(name)
        groups, events, notes = step_groups(folder, run, step)
        waves = [(e.get("wave"), e.get("t")) for e in events if e.get("event") == "wave"]
        timeline = folder.exists(folder.step(run, step) / "wave_timeline.png")
        points = [{"i": g.index, "s": g.opened_at, "t": g.finished_at, "v": g.verdict, "p": g.task_id}
                  for g in groups if g.finished_at is not None]
        return page("step.html", name=name, step=step, groups=groups, notes=notes, timeline=timeline,
                    points={"groups": points, "waves": [t for _, t in waves if isinstance(t, (int, float))]},
                    steps=folder.steps(run))

    @app.get("/run/{name}/step/{step}/timeline.png")
    def timeline_png(name: str, step: int) -> Response:
        path = folder.step(folder.run(name), step) / "wave_timeline.png"
        return Response(folder.picture(path), media_type="image/png")

    @app.get("/run/{name}/step/{step}/episode/{group}/{sibling}", response_class=HTMLResponse)
    def episode_page(name: str, step: int, group: int, sibling: int) -> HTMLResponse:
        check_trace_name(group, sibling)
        run = folder.run(name)
        episode = read_episode(folder, trace_path(folder, run, step, group, sibling))
        groups, _, _ = step_groups(folder, run, step)
        verdict = next((g for g in groups if g.index == group), None)
        record = group_record(folder, run, step, group) if verdict is None or verdict.verdict in FAILED else None
        return page("episode.html", name=name, step=step, group=group, sibling=sibling, episode=episode,
                    verdict=verdict, triage=record, siblings=siblings(folder, run, step, group))

    @app.get("/run/{name}/prompt/{task_id}", response_class=HTMLResponse)
    def prompt_page(name: str, task_id: str) -> HTMLResponse:
        if not TASK_ID.fullmatch(task_id):
            raise OutsideError(f"{printable(task_id, limit=60)!r} is not a prompt's id")
        run = folder.run(name)
        found, notes = prompt_groups(folder, run, task_id)
        rule, turns, skip_notes = skips(folder, run, task_id)
        skipped = [t.step for t in turns if t.skipped]
        return page("prompt.html", name=name, task_id=task_id, found=found, notes=notes + skip_notes, rule=rule,
                    skipped=skipped, skipping_rule=SKIPPING_RULE)

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name == "plotly.min.js":
            if name not in scripts:
                scripts[name] = _plotly_js()
            body, kind = scripts[name], "text/javascript"
        elif name in STATIC:
            body, kind = resources.files("shopsimrl.webview").joinpath("static", name).read_bytes(), STATIC[name]
        else:
            raise OutsideError(f"no file {printable(name, limit=60)!r}")
        return Response(body, media_type=kind, headers={"Cache-Control": "max-age=3600"})

    return app


def _summaries(folder: Folder) -> list[Any]:
    held = held_locks()
    return [summarize(folder, name, held) for name in folder.run_names()]
