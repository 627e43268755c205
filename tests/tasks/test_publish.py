"""`vitlab push RUN org/name --to DIR`: the folder a Hub repository holds, its card checked by huggingface_hub's own
readers against the run's files (every figure from metrics.jsonl, the command and machine from config.json), and the
folder answering `vitlab predict` as the run does."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from vitlab.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def rows_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def card_results(folder: Path) -> dict[tuple[str, str], float]:
    """(split, metric) -> value, as the Hub reads the card's model-index (huggingface_hub's parser)."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(folder / "README.md")
    return {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results or []}


def test_a_pushed_run_is_a_folder_whose_card_and_answers_are_the_runs(trained, tmp_path, capsys):
    from huggingface_hub import ModelCard

    run = trained["cls"]
    before = digests(run)
    out = tmp_path / "repo"
    assert main(["push", str(run), "me/vit-fashion", "--to", str(out)]) == 0
    assert digests(run) == before  # the run is only read
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "config.json", "README.md", "curves.png"}
    saved = json.loads((run / "config.json").read_text())
    assert (out / "model.safetensors").read_bytes() == (run / "best.safetensors").read_bytes()

    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "vitlab" and card.data.pipeline_tag == "image-classification"
    assert card.data.datasets == ["zalando-datasets/fashion_mnist"] and "vit" in card.data.tags
    *evaluated, test_row = rows_of(run)
    selected = next(row for row in evaluated if row["step"] == test_row["selected_step"])
    results = card_results(out)
    assert results[("test", "acc")] == pytest.approx(test_row["test_acc"], abs=1e-6)
    assert results[("validation", "acc")] == pytest.approx(selected["val_acc"], abs=1e-6)
    assert saved["command"].startswith("vitlab train ") and saved["command"] in card.text
    assert saved["machine"]["cpu"] in card.text and saved["machine"]["isa"] in card.text
    for name in saved["data"]["classes"]:
        assert f"| {name} |" in card.text
    assert "hf-hub:me/vit-fashion" in card.text and "@inproceedings{dosovitskiy2021" in card.text

    capsys.readouterr()
    image = str(EXAMPLES / "test0-ankle-boot.png")
    assert main(["predict", str(run), image, "--json"]) == 0
    by_run = json.loads(capsys.readouterr().out)
    assert main(["predict", str(out), image, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_run  # same labels, same scores
    # and on a runtime: its graphs named by the folder's model.safetensors, kept beside it as a run's are
    assert main(["predict", str(out), image, "--json", "--runtime", "onnxruntime"]) == 0
    on_runtime = json.loads(capsys.readouterr().out)
    (top_k,), (expected,) = ([item["top_k"] for item in answer] for answer in (on_runtime, by_run))
    assert [c["class"] for c in top_k] == [c["class"] for c in expected]
    assert [c["probability"] for c in top_k] == pytest.approx([c["probability"] for c in expected], abs=1e-4)
    assert [p.name.split("-")[0] for p in (out / "runtime").glob("*.onnx")] == ["model"]
    # read as a checkpoint (convert, export): the model its weights file names, with its labels and preprocessing
    from vitlab import runtime
    from vitlab.checkpoint import load_model as load_weights_file

    assert main(["convert", str(out), str(tmp_path / "again.safetensors")]) == 0
    assert load_weights_file(tmp_path / "again.safetensors").config.labels == tuple(saved["data"]["classes"])
    assert main(["export", str(out), "--format", "onnx", "--out", str(tmp_path / "graph.onnx")]) == 0
    graph = runtime.load(tmp_path / "graph.onnx")
    assert graph.labels == tuple(saved["data"]["classes"]) and graph.preprocessing is not None


def test_a_pushed_run_on_the_hub_answers_by_its_name_as_the_run_does(trained, local_hub, tmp_path, capsys):
    """The folder, as the Hub serves it (published to the local Hub): `vitlab predict hf-hub:org/name` reads it as
    the run it is, its record included (the run's test-time flip: the same scores), and `vitlab.pipeline` names
    the same class."""
    import vitlab

    run = trained["cls"]
    assert main(["push", str(run), "me/vit-hub", "--to", str(tmp_path / "repo")]) == 0
    local_hub.publish_folder("me/vit-hub", tmp_path / "repo")
    image = str(EXAMPLES / "test1-pullover.png")
    capsys.readouterr()
    assert main(["predict", str(run), image, "--json"]) == 0
    by_run = json.loads(capsys.readouterr().out)
    assert main(["predict", "hf-hub:me/vit-hub", image, "--json"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert [item["top_k"] for item in by_name] == [item["top_k"] for item in by_run]
    answer = vitlab.pipeline(model="hf-hub:me/vit-hub")(image)
    assert answer[0]["label"] == by_run[0]["top_k"][0]["class"]
    # scored on its data by name: the figures printed, nothing written into the snapshot in the hub cache
    from huggingface_hub import snapshot_download

    snapshot = Path(snapshot_download("me/vit-hub"))
    before = sorted(p.name for p in snapshot.rglob("*"))
    assert main(["eval", "hf-hub:me/vit-hub", "--json"]) == 0
    assert "confusion_png" not in json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in snapshot.rglob("*")) == before
    # other weights for its model (--weights): on a runtime, graphs of their own, not the published weights' graph
    import torch

    from vitlab.checkpoint import save_weights
    from vitlab.engine.run import RunDir

    model = RunDir(run).load_model("best")
    torch.manual_seed(0)
    with torch.no_grad():  # other weights, near enough the trained ones that the logits stay of their size
        for param in model.parameters():
            param.add_(0.2 * torch.randn_like(param))
    other = save_weights(model, tmp_path / "other.safetensors")
    answers = []
    for argv in (["hf-hub:me/vit-hub", "--runtime", "onnxruntime"],
                 ["hf-hub:me/vit-hub", "--runtime", "onnxruntime", "--weights", str(other)],
                 [str(run), "--weights", str(other)]):
        assert main(["predict", argv[0], image, "--json", *argv[1:]]) == 0
        answers.append([c["probability"] for c in json.loads(capsys.readouterr().out)[0]["top_k"]])
    published, on_runtime, by_torch = answers
    assert on_runtime == pytest.approx(by_torch, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(on_runtime, published)) > 0.01  # not the published weights' answer
    # served beside the run, it answers as the run does
    from vitlab.serve.runs import load_runs

    by_name, own = load_runs(["hf-hub:me/vit-hub", str(run)])
    assert by_name.describe()["classes"] == own.describe()["classes"]
    answers = [served.task.answer(served.model, served.saved, Path(image), tmp_path, served.context, attention=False)
               for served in (by_name, own)]
    assert answers[0]["top_k"] == answers[1]["top_k"]


def test_a_run_pushed_with_its_graphs_answers_by_name_on_them_without_exporting_again(
        trained, local_hub, tmp_path, capsys, monkeypatch):
    """--include-graphs: refused while the run keeps no graph of its weights; once `vitlab predict --runtime
    onnxruntime` made one, the repository holds it (the card lists it, the graph records the labels), and the
    pushed run read by name answers on it as the run does, with the exporter forbidden."""
    import vitlab.runtime
    from vitlab.runtime import load
    from vitlab.runtime.export import GRAPH_FORMAT

    run = tmp_path / "run"
    shutil.copytree(trained["cls"], run, ignore=shutil.ignore_patterns("runtime"))
    image = str(EXAMPLES / "test1-pullover.png")
    assert main(["push", str(run), "me/vit-graphs", "--include-graphs", "--to", str(tmp_path / "none")]) == 2
    assert "keeps no runtime graphs of its best weights" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()

    assert main(["predict", str(run), image, "--json", "--runtime", "onnxruntime"]) == 0
    by_run = json.loads(capsys.readouterr().out)
    assert main(["push", str(run), "me/vit-graphs", "--include-graphs"]) == 0
    capsys.readouterr()
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download("me/vit-graphs"))
    graphs = sorted(p.name for p in (folder / "graphs").iterdir())
    assert graphs == [f"model-g{GRAPH_FORMAT}-1x28x28.onnx"]  # the weights' time stamp left out of the name
    assert f"- `graphs/{graphs[0]}`" in (folder / "README.md").read_text()
    data = json.loads((run / "config.json").read_text())["data"]
    published = load(folder / "graphs" / graphs[0])  # a graph used alone: the run's labels and preprocessing
    assert list(published.labels) == data["classes"]
    assert published.preprocessing is not None and published.preprocessing.to_dict() == data["preprocessing"]

    def no_export(*args, **kwargs):
        raise AssertionError("the published graph was exported again")

    monkeypatch.setattr(vitlab.runtime, "export_graph", no_export)
    assert main(["predict", "hf-hub:me/vit-graphs", image, "--json", "--runtime", "onnxruntime"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert [item["top_k"] for item in by_name] == [item["top_k"] for item in by_run]


def test_each_tasks_run_pushed_to_the_hub_answers_by_name_as_the_run_does(trained, local_hub, tmp_path, capsys):
    """A detection, a segmentation and a VQGAN run, each pushed to the local Hub: by name they give the run's
    detections (every query, threshold 0), its mask and its reconstruction, byte for byte."""
    scene = str(sorted((trained["scenes"] / "images" / "test").glob("*.png"))[0])
    commands = {"detr": ["predict", "{}", scene, "--json", "--threshold", "0", "--out", "{out}"],
                "setr": ["predict", "{}", scene, "--json", "--out", "{out}"],
                "vqgan": ["reconstruct", "{}", scene, "--json", "--out", "{out}"]}
    for name, command in commands.items():
        assert main(["push", str(trained[name]), f"me/{name}-hub"]) == 0
        answers = []
        for source, out in ((str(trained[name]), tmp_path / f"{name}-run"), (f"hf-hub:me/{name}-hub",
                                                                             tmp_path / f"{name}-name")):
            capsys.readouterr()
            assert main([part.format(source, out=out) for part in command]) == 0
            printed = json.dumps(json.loads(capsys.readouterr().out)).replace(str(out), "OUT")
            answers.append((printed, {p.name: p.read_bytes() for p in sorted(out.iterdir())}))
        assert answers[0][0] == answers[1][0], name
        assert answers[0][1] and answers[0][1] == answers[1][1], name
    # the detector scored by name on its data: its COCO results file is not written into the hub cache's snapshot
    from huggingface_hub import snapshot_download

    snapshot = Path(snapshot_download("me/detr-hub"))
    before = sorted(p.name for p in snapshot.rglob("*"))
    assert main(["eval", "hf-hub:me/detr-hub", "--json"]) == 0
    assert "results_file" not in json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in snapshot.rglob("*")) == before


def test_push_uploads_one_commit_each_time_and_the_first_still_reads(trained, local_hub, tmp_path, capsys):
    """`vitlab push` without --to: the repository made, one commit of the folder `--to` writes; a second push (the
    last weights) is a second commit, and the first, pinned by its sha, still answers with the best weights; a
    branch where asked."""
    run = trained["cls"]
    assert main(["push", str(run), "me/vit-up"]) == 0
    first = local_hub.sha("me/vit-up")
    assert local_hub.file("me/vit-up", "model.safetensors") == (run / "best.safetensors").read_bytes()
    assert "hf-hub:me/vit-up" in capsys.readouterr().out
    assert main(["push", str(run), "me/vit-up", "--weights", "last", "--message", "the last weights"]) == 0
    second = local_hub.sha("me/vit-up")
    assert second != first and local_hub.file("me/vit-up", "model.safetensors") == \
        (run / "last.safetensors").read_bytes()
    assert local_hub.file("me/vit-up", "model.safetensors", first) == (run / "best.safetensors").read_bytes()
    from huggingface_hub import list_repo_files

    assert {"README.md", "config.json", "curves.png", "model.safetensors"} <= set(list_repo_files("me/vit-up"))
    image = str(EXAMPLES / "test2-trouser.png")
    capsys.readouterr()
    assert main(["predict", str(run), image, "--json", "--weights", "best"]) == 0
    by_run = json.loads(capsys.readouterr().out)
    assert main(["predict", f"hf-hub:me/vit-up@{first}", image, "--json"]) == 0
    assert [item["top_k"] for item in json.loads(capsys.readouterr().out)] == [item["top_k"] for item in by_run]
    assert main(["push", str(run), "me/vit-up", "--revision", "dev"]) == 0
    assert local_hub.sha("me/vit-up", "dev") != local_hub.sha("me/vit-up")  # main untouched
    assert local_hub.sha("me/vit-up") == second


def test_a_hub_that_refuses_the_upload_is_quoted_and_nothing_is_left(trained, local_hub, monkeypatch, capsys):
    import tempfile

    from tests.hub_server import _error

    refusal = "You don't have the rights to create a model under the namespace \"me\""
    monkeypatch.setattr(local_hub, "_create_repo", lambda body: _error(403, None, refusal))
    made, mkdtemp = [], tempfile.mkdtemp  # the folders this push stages in (another worker's pushes are not seen)
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *args, **kwargs: made.append(mkdtemp(*args, **kwargs)) or made[-1])
    assert main(["push", str(trained["cls"]), "me/refused"]) == 2
    assert "rights to create a model" in capsys.readouterr().err
    assert made and not any(Path(folder).exists() for folder in made)  # its staging folders removed


def test_push_in_timms_form_is_timms_folder_with_the_same_card(trained, tmp_path, capsys):
    """`--format timm`: the model as timm builds it (equal logits), the run's record beside it as vitlab_run.json,
    the card saying timm and how timm loads it; a family timm has no form of is refused, nothing written."""
    import timm
    import torch
    from huggingface_hub import ModelCard

    from vitlab.interop import load_model
    from vitlab.interop.convert import model_from_checkpoint

    run = trained["cls"]
    assert main(["push", str(run), "me/vit-timm", "--format", "timm", "--to", str(tmp_path / "repo")]) == 0
    assert {p.name for p in (tmp_path / "repo").iterdir()} == {"model.safetensors", "config.json", "README.md",
                                                                "curves.png", "vitlab_run.json"}
    theirs = timm.create_model(f"local-dir:{tmp_path / 'repo'}", pretrained=True).eval()
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(theirs(x), load_model(run / "best.safetensors").eval()(x), atol=1e-5, rtol=0)
    card = ModelCard.load(tmp_path / "repo" / "README.md")
    assert card.data.library_name == "timm" and 'timm.create_model("hf-hub:me/vit-timm"' in card.text
    record = json.loads((tmp_path / "repo" / "vitlab_run.json").read_text())
    assert record["published"]["format"] == "timm" and record["command"] == json.loads(
        (run / "config.json").read_text())["command"]
    # and vitlab reads timm's folder back as the same model (its heads from model_args, not the named architecture's)
    with torch.no_grad():
        torch.testing.assert_close(model_from_checkpoint(tmp_path / "repo").eval()(x), theirs(x), atol=1e-5, rtol=0)
    capsys.readouterr()
    image = str(EXAMPLES / "test1-pullover.png")
    answers = []
    for source in (run, tmp_path / "repo"):
        assert main(["predict", str(source), image, "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)[0]["top_k"])
    assert [c["class"] for c in answers[1]] == [c["class"] for c in answers[0]]
    capsys.readouterr()
    assert main(["push", str(trained["detr"]), "me/detr", "--format", "timm", "--to", str(tmp_path / "no")]) == 2
    assert "has no timm form" in capsys.readouterr().err
    assert not (tmp_path / "no").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


def test_the_card_follows_the_runs_figures_and_says_when_it_was_not_tested(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained["cls"], run)
    *evaluated, test_row = rows_of(run)
    changed = {**test_row, "test_acc": 0.123456}
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [*evaluated, changed]))
    assert main(["push", str(run), "me/a", "--to", str(tmp_path / "a")]) == 0
    assert card_results(tmp_path / "a")[("test", "acc")] == pytest.approx(0.123456)

    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in evaluated))  # never tested
    assert main(["push", str(run), "me/b", "--to", str(tmp_path / "b")]) == 0
    assert {split for split, _ in card_results(tmp_path / "b")} == {"validation"}
    assert "Not evaluated on a test set" in (tmp_path / "b" / "README.md").read_text()


def test_a_detection_run_is_pushed_with_its_pipeline_tag_and_labels(trained, tmp_path):
    from huggingface_hub import ModelCard

    run = trained["detr"]
    assert main(["push", str(run), "me/detr-scenes", "--to", str(tmp_path / "repo")]) == 0
    card = ModelCard.load(tmp_path / "repo" / "README.md")
    assert card.data.pipeline_tag == "object-detection" and card.data.datasets is None  # a folder of its own
    for name in json.loads((run / "config.json").read_text())["data"]["classes"]:
        assert f"| {name} |" in card.text

    # in transformers' form: its detector's folder, and a card whose usage line is the object-detection pipeline
    assert main(["push", str(run), "me/detr-hf", "--format", "transformers", "--to", str(tmp_path / "hf")]) == 0
    assert {p.name for p in (tmp_path / "hf").iterdir()} == {"model.safetensors", "config.json", "README.md",
                                                              "preprocessor_config.json", "curves.png",
                                                              "vitlab_run.json"}
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "object-detection"
    assert 'pipeline("object-detection", model="me/detr-hf")' in card.text
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["DetrForObjectDetection"]


def test_bad_pushes_are_refused_and_write_nothing(trained, tmp_path, capsys):
    run = str(trained["cls"])
    assert main(["push", run, "not-a-repo-id", "--to", str(tmp_path / "x")]) == 2
    assert "is not a Hub repository id: give org/name" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("a user's file")
    assert main(["push", run, "me/x", "--to", str(taken)]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no folder, no staging left behind
