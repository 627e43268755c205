"""The command line a person reads: each task's own help, recipes as files (`--config`, `--print-config`, the
files under recipes/), `vitlab runs`, and shell completion."""

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from vitlab.cli.main import main
from vitlab.engine.config import LoopConfig
from vitlab.engine.run import RunDir
from vitlab.interop import read_state_dict
from vitlab.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "tests" / "fixtures" / "fashion-mnist-mini"
TINY = ["--data-dir", str(MINI), "--allow-partial-data", "--model", "vit_tiny_patch4_28", "--batch-size", "32",
        "--epochs", "1", "--curves", "never"]
OLD_TRAIN_HELP_LINES = 536  # every task's options on every line, whatever --task said


def printed(capsys, *argv: str) -> str:
    """What `vitlab ARGV` prints, --help's exit included."""
    try:
        main(list(argv))
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    return capsys.readouterr().out


def flags(config_class: type) -> set[str]:
    return {field.metadata.get("flag") or "--" + field.name.replace("_", "-")
            for field in dataclasses.fields(config_class) if field.metadata.get("cli", True)}


# -- help --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", list(TASKS))
def test_a_tasks_help_lists_its_options_with_its_defaults_and_no_other_tasks(task, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = printed(capsys, "train", "--task", task, "--help")
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    mine = flags(TASKS[task].Config) | flags(LoopConfig)
    assert mine <= shown, mine - shown
    others = set().union(*(flags(cls.Config) for cls in TASKS.values())) - mine
    assert not shown & others, shown & others
    assert len(text.splitlines()) < 150 < OLD_TRAIN_HELP_LINES
    # each default is this task's: its recipe's epochs (or steps), batch size and lr, not a list of every task's
    recipe = TASKS[task].loop_defaults(TASKS[task].Config())
    for key in ("batch_size", "lr"):
        if key in recipe and len(TASKS[task].recipes()) == 1:
            line = re.search(rf"--{key.replace('_', '-')} \S+\s+(.*?)\(default: ([^)]*)\)", text, re.S)
            assert line and line.group(2) == str(recipe[key]), (key, line and line.group(2))
    assert "fashion-mnist 128" not in text


def test_the_shared_help_says_how_to_see_a_tasks(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = printed(capsys, "train", "--help")
    assert "vitlab train --task TASK --help" in " ".join(text.split())
    assert "--epochs" in text and "--num-queries" not in text and "--problem" not in text
    assert len(text.splitlines()) < 100


def test_a_recipe_files_task_decides_the_help(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task: seq2seq\n")
    text = printed(capsys, "train", "--config", str(recipe), "--help")
    assert "--problem" in text and "--num-queries" not in text


@pytest.mark.parametrize("command, attribute", [("eval", "EvalOptions"), ("predict", "PredictOptions")])
def test_eval_and_predict_on_a_run_show_that_runs_task_options(command, attribute, tmp_path, capsys):
    everyone = set().union(*(flags(getattr(cls, attribute)) for cls in TASKS.values()))
    shared = printed(capsys, command, "--help")
    assert f"vitlab {command} RUN_OR_NAME --help" in " ".join(shared.split())
    for task, cls in TASKS.items():
        run = tmp_path / task
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"task": task}))
        text = printed(capsys, command, str(run), "--help")
        shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
        mine = flags(getattr(cls, attribute))
        assert mine <= shown and not (everyone - mine - set(re.findall(r"--[a-z-]+", shared))) & shown, task
    # a release by its tag: its family's task, without loading anything
    text = printed(capsys, command, "detr_resnet50.coco", "--help")
    assert flags(getattr(TASKS["detection"], attribute)) <= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


# -- recipes as files --------------------------------------------------------------------------------------------
def weights(run: Path) -> dict:
    return read_state_dict(RunDir(run).weights_file("last"))[0]


def test_a_run_repeats_from_its_config_json_and_from_its_printed_recipe_bit_for_bit(tmp_path, capsys):
    """Run a from flags; run b from a's config.json; run c from the recipe --print-config printed for the same
    flags: the three end on the same weights, bit for bit (the CPU is deterministic here)."""
    assert main(["train", *TINY, "--lr", "3e-3", "--out", str(tmp_path / "a")]) == 0
    assert main(["train", "--config", str(tmp_path / "a" / "config.json"), "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["train", *TINY, "--lr", "3e-3", "--print-config"]) == 0
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(capsys.readouterr().out)
    assert yaml.safe_load(recipe.read_text())["training"]["lr"] == 3e-3
    assert not (tmp_path / "runs").exists()  # --print-config trained nothing
    assert main(["train", "--config", str(recipe), "--out", str(tmp_path / "c")]) == 0
    a = weights(tmp_path / "a")
    for other in ("b", "c"):
        b = weights(tmp_path / other)
        assert a.keys() == b.keys() and all((a[key] == b[key]).all() for key in a), other
    configs = [json.loads((tmp_path / name / "config.json").read_text()) for name in "abc"]
    assert configs[0]["config"] == configs[1]["config"] == configs[2]["config"]
    assert configs[0]["loop"] == configs[1]["loop"] == configs[2]["loop"]


def resolved(capsys, *argv: str) -> dict:
    assert main(["train", *argv, "--print-config"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_a_recipe_is_read_flat_or_grouped_from_yaml_or_json_and_flags_win(tmp_path, capsys):
    flat = tmp_path / "flat.yaml"
    flat.write_text("task: detection\ndata: scenes/\nbatch-size: 4\nlr: 2e-4\nnum_queries: 7\nbetas: [0.8, 0.9]\n")
    grouped = tmp_path / "grouped.json"
    grouped.write_text(json.dumps({"task": "detection", "training": {"batch_size": 4, "lr": "2e-4",
                                                                    "betas": [0.8, 0.9]},
                                   "data": {"data": "scenes/"}, "model": {"num_queries": 7}}))
    a, b = resolved(capsys, "--config", str(flat)), resolved(capsys, "--config", str(grouped))
    assert a == b
    assert a["task"] == "detection" and a["training"]["lr"] == 2e-4 and a["training"]["betas"] == [0.8, 0.9]
    assert a["model"]["num_queries"] == 7 and a["training"]["epochs"] == 50  # the rest: detection's recipe
    over = resolved(capsys, "--config", str(flat), "--lr", "1e-3", "--steps", "30")
    assert over["training"]["lr"] == 1e-3 and over["training"]["batch_size"] == 4
    assert over["training"]["steps"] == 30 and over["training"]["epochs"] is None  # a length replaces the other


@pytest.mark.parametrize("text, said", [
    ("bach_size: 4\n", "unknown option 'bach_size' (did you mean batch_size?)"),
    ("num_queries: 4\n", "num_queries is an option of --task detection, not of --task classification"),
    ("task: detection\nclassification: {mixup: 0.2}\n", "holds --task classification's options"),
    ("lr: fast\n", "--lr in"),
    ("epochs: 2.5\n", "must be a whole number"),
    ("task: detectoin\n", "did you mean detection?"),
    ("- lr: 1\n", "a recipe is a mapping of options"),
    ("lr: [1\n", "not valid YAML"),
])
def test_a_bad_recipe_is_refused_saying_what_and_where(text, said, tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    assert main(["train", "--config", str(recipe), "--print-config"]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert said in error and "bad.yaml" in error, error


def test_a_recipe_for_another_task_than_task_is_refused(tmp_path, capsys):
    recipe = tmp_path / "detr.yaml"
    recipe.write_text("task: detection\n")
    assert main(["train", "--config", str(recipe), "--task", "segmentation", "--print-config"]) == 2
    assert "is a recipe for --task detection" in capsys.readouterr().err


RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: str(path.relative_to(ROOT / "recipes")))
def test_every_recipe_file_resolves_and_its_page_uses_it(recipe, capsys):
    """A recipe under recipes/ names only options that exist, with values they accept; a system page shows it."""
    name = str(recipe.relative_to(ROOT))
    text = resolved(capsys, "--config", str(recipe))
    assert text["task"] == (yaml.safe_load(recipe.read_text()).get("task") or "classification")
    pages = "".join(page.read_text() for page in (ROOT / "docs").rglob("*.md"))
    assert f"--config {name}" in pages, f"no page shows {name}"


def test_the_pages_name_only_recipes_that_exist_and_the_default_recipe_is_the_file(capsys):
    pages = "".join(page.read_text() for page in (ROOT / "docs").rglob("*.md")) + (ROOT / "README.md").read_text()
    named = set(re.findall(r"--config (recipes/\S+\.yaml)", pages))
    assert named and all((ROOT / name).is_file() for name in named), named
    default = ROOT / "recipes" / "vit" / "fashion-mnist.yaml"
    assert resolved(capsys, "--config", str(default)) == resolved(capsys)
    assert f"```yaml\n{default.read_text()}```" in (ROOT / "docs" / "getting-started.md").read_text()


# -- vitlab runs -------------------------------------------------------------------------------------------------
def fingerprint(folder: Path) -> dict:
    return {str(path): (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_runs_lists_finished_stopped_failed_and_damaged_runs_newest_first_and_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", *TINY, "--out", str(runs / "done")]) == 0
    assert main(["train", *TINY, "--epochs", "2", "--max-epochs-this-run", "1", "--out", str(runs / "paused")]) == 0
    (runs / "crashed").mkdir()  # died before its first checkpoint: a config and nothing to resume
    shutil.copy(runs / "done" / "config.json", runs / "crashed" / "config.json")
    (runs / "sweep" / "broken").mkdir(parents=True)
    (runs / "sweep" / "broken" / "config.json").write_text('{"task": "classif')  # cut short
    (runs / "notes").mkdir()  # not a run: not listed
    capsys.readouterr()
    before = fingerprint(runs)
    assert main(["runs", str(runs), "--json"]) == 0
    listed = {run["name"]: run for run in json.loads(capsys.readouterr().out)}
    assert fingerprint(runs) == before  # reading never writes
    assert set(listed) == {"done", "paused", "crashed", "sweep/broken"}
    assert [listed[name]["status"] for name in ("done", "paused", "crashed", "sweep/broken")] == [
        "finished", "stopped", "failed", "damaged"]
    done = listed["done"]
    final = RunDir(runs / "done").read_metrics()[-1]
    assert (done["task"], done["model"], done["data"]) == ("classification", "vit_tiny_patch4_28", "fashion-mnist")
    assert (done["done"], done["planned"], done["unit"]) == (1, 1, "epochs")
    assert (done["val_metric"], done["val"], done["test"]) == ("val_acc", final["selected_value"], final["test_acc"])
    assert done["minutes"] == round(final["elapsed_s"] / 60, 1)
    assert (listed["paused"]["done"], listed["paused"]["planned"]) == (1, 2) and listed["paused"]["test"] is None
    assert "config.json" in listed["sweep/broken"]["why"]
    assert main(["runs", str(runs)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:6] == ["run", "task", "model", "data", "progress", "status"]
    order = [line.split()[0] for line in table[1:]]
    assert order[0] == "sweep/broken" and order.index("paused") < order.index("done")  # newest first
    assert "damaged: config.json" in table[1] and "1/2 epochs" in table[order.index("paused") + 1]
    assert main(["runs", str(runs), "--sort", "val_acc", "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)
    scored = [run["val"] for run in ranked if run["val"] is not None]
    assert scored == sorted(scored, reverse=True) and {run["status"] for run in ranked[-2:]} == {"failed", "damaged"}


# -- completion --------------------------------------------------------------------------------------------------
def test_bash_completion_completes_commands_options_tasks_models_and_tags(tmp_path, capsys):
    script = tmp_path / "vitlab.bash"
    script.write_text(printed(capsys, "completion", "bash"))

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{word}'" for word in words)
        shell = (f"source {script}; COMP_WORDS=(vitlab {line}); COMP_CWORD={len(words)}; _vitlab; "
                 'printf "%s\\n" "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True,
                              cwd=tmp_path).stdout.split()

    assert {"train", "eval", "predict", "runs", "completion"} <= set(complete(""))
    assert complete("tra") == ["train", "translate"]
    assert "--checkpoint-every" in complete("train", "--check") and "--num-queries" in complete("train", "--num")
    assert complete("train", "--task", "det") == ["detection"]
    assert "deformable_detr_resnet50" in complete("train", "--model", "deformable_detr_")
    assert "detr_resnet50.coco" in complete("predict", "detr_resnet50.co")
    assert complete("train", "--curves", "n") == ["never"]
    assert complete("completion", "f") == ["fish"]


def test_zsh_and_fish_completions_name_every_command_and_option(capsys):
    from vitlab.cli.main import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    zsh, fish = printed(capsys, "completion", "zsh"), printed(capsys, "completion", "fish")
    assert zsh.startswith("#compdef vitlab") and "bashcompinit" in zsh and "complete -o filenames" in zsh
    for name, parser in commands.items():
        assert f"-a {name} " in fish, name
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--"):
                    assert f"-l {flag[2:]}" in fish, (name, flag)
    assert "-l task -x -a 'classification seq2seq" in fish
