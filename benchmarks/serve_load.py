"""Load on `vitlab serve`: N requests from K concurrent clients against a server on 127.0.0.1, every answer checked.

    python benchmarks/serve_load.py RUN_DIR [RUN_DIR ...]          # 200 requests from 8 clients
    python benchmarks/serve_load.py runs/fm --requests 400 --clients 16 --workers 2
    python benchmarks/serve_load.py --train-runs runs/serve --separately   # the documented table, from nothing

--train-runs DIR trains the five runs of the documented table into DIR first (those missing there): the presets of
the serving guide's screenshots (vit_tiny_patch7_28, deformable_detr_small, setr_naive_small, vqgan_small and
gpt_prior_small), each for a few optimizer steps. What a request costs depends on the architecture and the image,
not on what the weights learned, so short runs measure the server as well as long ones.

The server is `vitlab serve RUN_DIR... --port P` in a process of its own (the page included, as users start it).
Each run contributes its example images (a prior: samples of class 0); the requests go round those jobs. First
every job is asked once alone: that answer is the one each later answer of the same job must equal. An error is
any answer that is not 200, a connection that fails, or an answer that differs from the one given alone.

Reports the errors (the bar: none), the median, p95 and largest latency, the throughput, and the server's memory:
its resident size before the load, the largest sampled during it, and the kernel's high-water mark (VmHWM).
Writes benchmarks/results/serve_load.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"


def jobs_for(runs, attention: bool = True) -> list[tuple[str, Path | None, dict[str, str]]]:
    """(run name, image, form fields) for each example image of each served run; a prior: samples of class 0.
    attention=False: classification answers without their attention maps."""
    jobs = []
    for run in runs:
        if run.kind == "prior":
            jobs.append((run.name, None, {"n": "4", "class_index": "0"}))
        else:
            fields = {"attention": "false"} if run.kind == "classification" and not attention else {}
            jobs += [(run.name, path, fields) for path in run.examples]
    return jobs


def ask(url: str, job: tuple[str, Path | None, dict[str, str]], timeout: float = 300) -> tuple[int, dict | str]:
    import httpx

    run, path, fields = job
    files = {"image": (path.name, path.read_bytes(), "image/png")} if path else None
    answer = httpx.post(f"{url}/api/runs/{run}/predict", files=files, data=fields, timeout=timeout)
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return answer.status_code, answer.text


def comparable(answer):
    """The answer without what changes from call to call (a restoration's timing)."""
    return {k: v for k, v in answer.items() if k != "seconds"} if isinstance(answer, dict) else answer


def load_test(url: str, jobs: list, requests: int = 200, clients: int = 8) -> dict:
    """`requests` requests over `clients` threads, going round `jobs`; every answer checked against the job's
    answer alone. Returns the latencies (ms) and every error."""
    if not jobs:
        raise ValueError("no jobs: the server lists no run with example images")
    alone = []
    for job in jobs:
        status, answer = ask(url, job)
        if status != 200:
            raise RuntimeError(f"{job[0]} answered {status} alone: {answer}")
        alone.append(comparable(answer))
    latencies: list[float] = [0.0] * requests
    errors: list[str] = []

    def one(index: int) -> None:
        job = jobs[index % len(jobs)]
        start = time.perf_counter()
        try:
            status, answer = ask(url, job)
        except Exception as error:  # noqa: BLE001 - every failure is counted and reported, whatever it was
            errors.append(f"request {index} ({job[0]}): {type(error).__name__}: {error}")
            return
        latencies[index] = 1000 * (time.perf_counter() - start)
        if status != 200:
            errors.append(f"request {index} ({job[0]}): HTTP {status}: {str(answer)[:200]}")
        elif comparable(answer) != alone[index % len(jobs)]:
            errors.append(f"request {index} ({job[0]}): the answer differs from the one given alone")

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    done = sorted(latencies)
    return {"requests": requests, "clients": clients, "jobs": len(jobs), "errors": errors,
            "p50_ms": statistics.median(done), "p95_ms": done[min(len(done) - 1, int(0.95 * len(done)))],
            "max_ms": done[-1], "wall_s": wall, "requests_per_s": requests / wall}


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (the peak resident size so far) of a process, in MiB (Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


class MemorySampler:
    """The largest VmRSS of a process, sampled every `every` seconds in a thread."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        self.pid, self.every, self.peak = pid, every, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, memory_mb(self.pid)["VmRSS"])
            time.sleep(self.every)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


def start_server(run_dirs: list[str], port: int, workers: int, page: bool = True) -> subprocess.Popen:
    import httpx

    argv = [sys.executable, "-m", "vitlab", "serve", *run_dirs, "--port", str(port), "--workers", str(workers),
            "--queue", "256"]
    process = subprocess.Popen(argv + ([] if page else ["--no-page"]), stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vitlab serve exited with {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("vitlab serve did not start in 5 minutes")


# (name, `vitlab train` arguments) of the documented table's runs; {data} is the scenes folder, {runs} the runs'
TRAINED_RUNS = (
    ("cls", ["--model", "vit_tiny_patch7_28"]),
    ("deformable", ["--task", "detection", "--model", "deformable_detr_small", "--data", "{data}",
                    "--batch-size", "4"]),
    ("setr", ["--task", "segmentation", "--model", "setr_naive_small", "--data", "{data}", "--batch-size", "4"]),
    ("vqgan", ["--task", "vqgan", "--model", "vqgan_small", "--eval-images", "200"]),
    ("prior", ["--task", "prior", "--model", "gpt_prior_small", "--vqgan", "{runs}/vqgan", "--eval-samples", "0"]),
)


def train_runs(folder: Path, steps: int = 20) -> list[str]:
    """The documented table's runs in `folder`, each trained for `steps` steps where it is not there yet (a run
    with its best weights is kept); the scenes they need are made there too. Returns the run folders in order."""
    from vitlab.cli.main import main as vitlab

    folder.mkdir(parents=True, exist_ok=True)
    scenes = folder / "scenes"
    made = (scenes / "annotations").is_dir() or vitlab(["make-scenes", "--out", str(scenes), "--train", "64",
                                                        "--val", "16", "--test", "16"]) == 0
    if not made:
        raise RuntimeError("vitlab make-scenes failed")
    runs = []
    for name, arguments in TRAINED_RUNS:
        run = folder / name
        if not (run / "best.safetensors").is_file():
            arguments = [a.format(data=scenes, runs=folder) for a in arguments]
            if vitlab(["train", *arguments, "--steps", str(steps), "--out", str(run), "--overwrite"]) != 0:
                raise RuntimeError(f"vitlab train failed for {name}: {' '.join(arguments)}")
        runs.append(str(run))
    return runs


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [f"# vitlab serve under load: {result['requests']} requests from {result['clients']} concurrent clients",
             "", f"`python benchmarks/serve_load.py {' '.join(result['argv'])}` on {m['cpus']} CPU cores "
                 f"({m['cpu']}), torch {m['torch']}, {result['workers']} prediction workers.", "",
             "| runs | requests | clients | errors | p50 latency | p95 latency | max | throughput | server RSS "
             "before | peak RSS during load | VmHWM |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in result["rows"]:
        lines.append(f"| {row['runs']} | {row['requests']} | {row['clients']} | {len(row['errors'])} | "
                     f"{row['p50_ms']:.0f} ms | {row['p95_ms']:.0f} ms | {row['max_ms']:.0f} ms | "
                     f"{row['requests_per_s']:.1f} req/s | {row['rss_before_mb']:.0f} MiB | "
                     f"{row['peak_rss_mb']:.0f} MiB | {row['vm_hwm_mb']:.0f} MiB |")
    for row in result["rows"]:
        lines += [f"\nerrors ({row['runs']}): " + ("none" if not row["errors"] else "; ".join(row["errors"][:20]))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    import torch

    from vitlab.atomic import atomic_write
    from vitlab.serve.runs import load_runs
    from vitlab.serve.server import free_port

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    parser.add_argument("--train-runs", type=Path, metavar="DIR", help="train the documented table's five runs "
                        "into DIR first (a few steps each; those already there are kept) and load those")
    parser.add_argument("--train-steps", type=int, default=20, help="steps of each run --train-runs trains")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--separately", action="store_true", help="also load each run alone (a row each; a "
                        "classification run also without its attention maps)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness import add_beside_option, write_json

    add_beside_option(parser)
    args = parser.parse_args(argv)
    if args.train_runs and args.run_dirs:
        parser.error("give run folders or --train-runs DIR, not both")
    if args.train_runs:
        args.run_dirs = train_runs(args.train_runs, args.train_steps)
    if not args.run_dirs:
        parser.error("name the run folders to serve, or --train-runs DIR to train the documented ones there")

    sets = [(args.run_dirs, True)]
    if args.separately:
        for run in args.run_dirs:
            task = json.loads((Path(run) / "config.json").read_text()).get("task", "classification")
            sets += [([run], True)] if len(args.run_dirs) > 1 else []
            sets += [([run], False)] if task == "classification" else []
    rows = []
    for run_dirs, attention in sets:
        port = free_port()
        process = start_server(run_dirs, port, args.workers)
        url = f"http://127.0.0.1:{port}"
        try:
            before = memory_mb(process.pid)["VmRSS"]
            jobs = jobs_for(load_runs(run_dirs), attention)  # the server's names and examples, from the folders
            with MemorySampler(process.pid) as sampler:
                row = load_test(url, jobs, args.requests, args.clients)
            label = ", ".join(Path(r).name for r in run_dirs) + ("" if attention else " (no attention maps)")
            row.update({"runs": label, "attention": attention, "rss_before_mb": before,
                        "peak_rss_mb": sampler.peak, "vm_hwm_mb": memory_mb(process.pid)["VmHWM"]})
        finally:
            process.terminate()
            process.wait(60)
        rows.append(row)
        print(f"{row['runs']}: {len(row['errors'])} errors, p50 {row['p50_ms']:.0f} ms, p95 {row['p95_ms']:.0f} ms, "
              f"peak RSS {row['peak_rss_mb']:.0f} MiB", flush=True)
    result = {"argv": argv if argv is not None else sys.argv[1:], "requests": args.requests, "clients": args.clients,
              "workers": args.workers, "rows": rows,
              "machine": {"cpus": len(os.sched_getaffinity(0)), "cpu": cpu_name(),
                          "torch": torch.__version__, "python": platform.python_version()}}
    result = write_json(args.out / "serve_load.json", result, beside=args.beside, indent=1)
    table = markdown(result)
    atomic_write(args.out / "serve_load.md", lambda f: f.write(table.encode()))
    print(table)
    return result


if __name__ == "__main__":
    main()
