"""`vitlab serve RUN_DIR [RUN_DIR ...]`: the runs' predictions as an HTTP API and a page in the browser."""

from __future__ import annotations

import argparse

from ..commands import command
from ..engine.flags import add_weights_flag
from ..tasks.runtime_flags import add_runtime_flags, on_runtime


@command("serve", order=200)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve trained runs: a page in the browser and an HTTP API",
                              description="A page at / with a tab per run, the JSON API under /api (GET /api/runs, "
                                          "POST /api/runs/NAME/predict) and its documentation at /docs. The models "
                                          "load once, at start; Ctrl-C or SIGTERM stops the server cleanly.")
    p.add_argument("run_dirs", metavar="RUN_OR_NAME", nargs="+", help="folders written by `vitlab train` (any "
                   "image task), each served under its folder's name, or models by name: release tags (vitlab models "
                   "--pretrained), hf-hub:org/name[@rev], weights files")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 serves other machines "
                   "(default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=7860, help="TCP port (default: 7860)")
    add_weights_flag(p, "best", "best; a run without it serves its last")
    p.add_argument("--workers", type=int, default=2, help="predictions run at once; torch's threads are shared "
                   "among them (default: 2)")
    p.add_argument("--queue", type=int, default=32, help="requests that may wait for a worker; more are answered "
                   "503 (default: 32)")
    p.add_argument("--max-upload-mb", type=float, default=20.0, help="largest upload, in MiB (default: 20)")
    p.add_argument("--max-pixels", type=float, default=16.0, help="largest image, in megapixels (width × height "
                   "/ 2^20) (default: 16)")
    p.add_argument("--oversize", choices=["refuse", "downscale"], default="refuse", help="an image above "
                   "--max-pixels: refuse it (HTTP 413) or downscale it to fit (default: refuse)")
    add_runtime_flags(p)
    p.add_argument("--reload", action="store_true", help="follow run folders that are still training: when a run's "
                   "weights file is replaced (a new best checkpoint), the next answer loads it first; each answer "
                   "comes from one complete checkpoint (torch only)")
    p.add_argument("--no-page", dest="page", action="store_false", help="serve the API only, without the "
                   "Gradio page (default: both)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
        if args.page:
            import gradio  # noqa: F401
    except ImportError as error:
        raise ValueError(f"`vitlab serve` needs {error.name}, part of the serve extra: pip install "
                         f"\"vitlab[serve]\" (or pip install -e \".[serve]\" in a checkout)") from None
    from ..serve.app import create_app
    from ..serve.pool import WorkerPool
    from ..serve.runs import load_runs
    from ..serve.server import Server
    from ..serve.uploads import ImageLimits

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1 … 65535, got {args.port}")
    limits = ImageLimits(max_bytes=int(args.max_upload_mb * 2**20), max_pixels=int(args.max_pixels * 2**20),
                         oversize=args.oversize)
    pool = WorkerPool(args.workers, args.queue)
    threads = pool.share_cores()
    torch_as_it_is = args.runtime == "torch" and args.precision == "fp32" and args.threads is None
    runs = load_runs(args.run_dirs, args.weights, reload=args.reload,
                     runtime=None if torch_as_it_is and args.reload else
                     lambda model, source: on_runtime(model, args, source, threads))
    app = create_app(runs, pool, limits, page=args.page)
    for served in runs:
        print(f"  {served.name}: {served.kind}, {served.model_name} ({served.weights} weights), "
              f"{served.path}")
    print(f"vitlab serve: {len(runs)} run(s), {pool.describe()}; images up to {args.max_pixels:g} MP "
          f"({args.oversize} larger ones)")
    shown = "localhost" if args.host in ("0.0.0.0", "::") else args.host
    print(f"  page http://{shown}:{args.port}/   API http://{shown}:{args.port}/api/runs   docs "
          f"http://{shown}:{args.port}/docs", flush=True)
    server = Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on"))
    server.run()
    if not server.started and not server.should_exit:
        raise ValueError(f"could not listen on {args.host}:{args.port} (is the port in use? choose another with "
                         f"--port)")
    print(f"vitlab serve: stopped{f' ({server.stopped_by})' if server.stopped_by else ''}; served {pool.served} "
          f"prediction(s)", flush=True)
    return 0
