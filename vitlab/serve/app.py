"""The HTTP API (FastAPI) with the page (Gradio) mounted at `/`.

    GET  /api/runs                   the runs served: name, task, model, classes, options, examples
    POST /api/runs/{name}/predict    multipart: `image` (an image file) and the task's options -> JSON
    GET  /docs                       the OpenAPI documentation of both

Both the API and the page call `runs.predict` on the same bounded worker pool.
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse

from .. import __version__
from .pool import WorkerPool
from .runs import OPTIONS, ServedRun, predict
from .uploads import BadInput, ImageLimits, read_image

FORM_FIELDS = {"image", "reference"} | {name for options in OPTIONS.values() for name in options}


def finite(value: Any) -> Any:
    """JSON has no inf or nan: they become null (a perfect reconstruction's PSNR, say)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def create_app(runs: list[ServedRun], pool: WorkerPool | None = None, limits: ImageLimits | None = None,
               page: bool = True) -> FastAPI:
    pool = pool or WorkerPool()
    limits = limits or ImageLimits()
    by_name = {run.name: run for run in runs}

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        pool.shutdown()

    app = FastAPI(title="vitlab", version=__version__, lifespan=lifespan,
                  description="Predictions of trained vitlab runs. Each run answers by its task: classes and "
                              "probabilities, boxes in pixels, a class mask as base64 PNG, a restored image, or "
                              "generated samples.")
    app.state.runs, app.state.pool, app.state.limits = by_name, pool, limits

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
        reference: Annotated[UploadFile | None, File(description="restoration: the clean image to score against")
                             ] = None,
        top_k: Annotated[int | None, Form(description="classification: classes to return; prior: sample among the "
                                                      "k most likely codes")] = None,
        attention: Annotated[bool | None, Form(description="classification: return the attention maps")] = None,
        threshold: Annotated[float | None, Form(description="detection: the score threshold")] = None,
        degradation: Annotated[str | None, Form(description="restoration: what to undo")] = None,
        class_index: Annotated[int | None, Form(description="prior: the class to draw")] = None,
        n: Annotated[int | None, Form(description="prior: how many samples")] = None,
        temperature: Annotated[float | None, Form(description="prior: softmax temperature")] = None,
        top_p: Annotated[float | None, Form(description="prior: nucleus probability")] = None,
        seed: Annotated[int | None, Form(description="prior: seed of the draws")] = None,
    ) -> dict[str, Any]:
        run = find(name)
        unknown = sorted(set((await request.form()).keys()) - FORM_FIELDS)
        if unknown:
            raise BadInput(422, f"unknown form field(s) {', '.join(unknown)}: a {run.kind} run takes `image` and "
                                f"{', '.join(OPTIONS[run.kind]) or 'no options'}")
        given = {"top_k": top_k, "attention": attention, "threshold": threshold, "degradation": degradation,
                 "class_index": class_index, "n": n, "temperature": temperature, "top_p": top_p, "seed": seed}
        options = {key: value for key, value in given.items() if value is not None}
        picture = await read_upload(image, "image") if image is not None else None
        clean = await read_upload(reference, "reference") if reference is not None else None
        filename = image.filename if image is not None else None
        return finite(await pool.run(predict, run, picture, filename, reference=clean, **options))

    async def read_upload(upload: UploadFile, field: str):
        data = await upload.read(limits.max_bytes + 1)
        return read_image(data, field, limits)

    if page:
        import gradio as gr

        from .page import build_page

        app = gr.mount_gradio_app(app, build_page(runs, pool, limits), path="/", ssr_mode=False,
                                  footer_links=["api"], allowed_paths=sorted({str(p.parent) for run in runs
                                                                              for p in run.examples}))
    return app
