"""The HTTP API (FastAPI) with the page (Gradio) mounted at `/`.

    GET  /api/runs                   the runs served: name, task, model, classes, options, examples
    POST /api/runs/{name}/predict    multipart: `image` (an image file), the task's options and its other uploads
                                     (a restoration run's `reference`) -> JSON
    GET  /docs                       the OpenAPI documentation of both

Both the API and the page call `runs.predict` on the same bounded worker pool.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, File, HTTPException, Request, UploadFile
from fastapi.responses import JSONResponse

from .. import __version__
from ..tasks import TASKS
from .pool import WorkerPool
from .runs import ServedRun, field_types, predict, uploads_of
from .uploads import BadInput, ImageLimits, read_image


def parse_field(name: str, text: str, kind: type) -> Any:
    """A form field's text as its option's type."""
    if kind is bool:
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
    else:
        try:
            return kind(text)
        except ValueError:
            pass
    raise BadInput(422, f"{name} must be {'true or false' if kind is bool else 'a ' + kind.__name__}, got {text!r}")


def finite(value: Any) -> Any:
    """JSON has no inf or nan: they become null (a perfect reconstruction's PSNR, say)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


class BodyLimit:
    """Refuse (413) a request whose body is larger than `limit` bytes before it is read whole: by its Content-Length
    where it says one, else once the bytes streamed pass the limit. The multipart parser would otherwise spool any
    upload to disk, however large, before the route could look at it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            response = JSONResponse({"detail": self._too_large(int(declared))}, status_code=413)
            return await response(scope, receive, send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, detail=self._too_large(seen, streamed=True))
            return message

        return await self.app(scope, counted, send)

    def _too_large(self, size: int, streamed: bool = False) -> str:
        return (f"the request is {'over ' if streamed else ''}{size:,} bytes, above this server's limit of "
                f"{self.limit:,} for a request (its uploads and fields); send smaller files (or start the server "
                f"with a larger --max-upload-mb)")


def create_app(runs: list[ServedRun], pool: WorkerPool | None = None, limits: ImageLimits | None = None,
               page: bool = True) -> FastAPI:
    pool = pool or WorkerPool()
    limits = limits or ImageLimits()
    by_name = {run.name: run for run in runs}
    known_fields = {f.name for task in TASKS.values() for f in dataclasses.fields(task.ServeOptions)}

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        pool.shutdown()

    app = FastAPI(title="vitlab", version=__version__, lifespan=lifespan,
                  description="Predictions of trained vitlab runs. Each run answers by its task: classes and "
                              "probabilities, boxes in pixels, a class mask as base64 PNG, a restored image, or "
                              "generated samples.")
    app.state.runs, app.state.pool, app.state.limits = by_name, pool, limits
    # every upload a run takes at its limit, and room for the form's other fields and the multipart framing
    uploads = 1 + max((len(uploads_of(run.task)) for run in runs), default=0)
    app.add_middleware(BodyLimit, limit=uploads * limits.max_bytes + (1 << 20))

    @app.exception_handler(BadInput)
    async def refuse(_: Request, error: BadInput) -> JSONResponse:
        headers = {"Retry-After": "1"} if error.status == 503 else None
        return JSONResponse({"detail": str(error)}, status_code=error.status, headers=headers)

    def find(name: str) -> ServedRun:
        if name not in by_name:
            raise BadInput(404, f"no run named {name!r}; this server serves {', '.join(by_name) or 'no runs'} "
                                f"(GET /api/runs lists them)")
        return by_name[name]

    @app.get("/api/runs", summary="The runs this server serves")
    async def list_runs() -> dict[str, Any]:
        return {"runs": [run.describe() for run in runs]}

    @app.post("/api/runs/{name}/predict", summary="Predict with one run",
              description="Send the image as the multipart field `image` (a prior run takes none), with the "
                          "options of the run's task (GET /api/runs lists them per run).")
    async def predict_route(
        request: Request,
        name: str,
        image: Annotated[UploadFile | None, File(description="the image (PNG, JPEG, WebP, ...)")] = None,
    ) -> dict[str, Any]:
        run = find(name)
        form = await request.form()
        fields, uploads = field_types(run.task), uploads_of(run.task)
        unknown = sorted(set(form.keys()) - known_fields - {"image"})
        if unknown:
            raise BadInput(422, f"unknown form field(s) {', '.join(unknown)}: a {run.kind} run takes `image` and "
                                f"{', '.join(run.options) or 'no options'}")
        options: dict[str, Any] = {}
        for key, value in form.items():
            if key in uploads:
                if isinstance(value, str):
                    raise BadInput(422, f"{key} must be an image file sent as a multipart upload, got text")
                options[key] = await read_upload(value, key)
            elif key in fields:
                options[key] = parse_field(key, str(value), fields[key])
            elif key != "image":
                options[key] = value  # another task's option: `predict` refuses it, naming what this run takes
        picture = await read_upload(image, "image") if image is not None else None
        filename = image.filename if image is not None else None
        return finite(await pool.run(predict, run, picture, filename, **options))

    async def read_upload(upload: UploadFile, field: str):
        data = await upload.read(limits.max_bytes + 1)
        return read_image(data, field, limits)

    if page:
        import gradio as gr

        from .page import build_page

        app = gr.mount_gradio_app(app, build_page(runs, pool, limits), path="/", ssr_mode=False,
                                  max_file_size=limits.max_bytes,
                                  footer_links=["api"], allowed_paths=sorted({str(p.parent) for run in runs
                                                                              for p in run.examples}))
    return app
