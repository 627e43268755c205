"""benchmarks/bf16_agreement.py --int8: the test images through every runtime and precision, each scored against
torch fp32 on the same images, with `vitlab quantize`'s graphs for int8."""

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
pytest.importorskip("nncf")


@pytest.mark.slow
def test_int8_rows_beside_fp32_with_the_quantizers_reports(trained, tmp_path):
    from benchmarks.bf16_agreement import main

    run = tmp_path / "cls"  # a copy: the graphs written into the run would be found by other tests of the same run
    shutil.copytree(trained["cls"], run, ignore=shutil.ignore_patterns("runtime", ".*"))  # graphs other tests write
    result = main([str(run), "--int8", "--samples", "8", "--batch-size", "64", "--out", str(tmp_path / "results")])
    rows = {(row["runtime"], row["precision"]): row for row in result["rows"]}
    assert {("onnxruntime", "int8"), ("openvino", "int8"), ("torch", "fp32")} <= set(rows)
    assert ("torch", "int8") not in rows and ("onnxruntime", "bf16") not in rows
    reference = rows["torch", "fp32"]
    assert reference["top1_agreement_with_torch_fp32"] == 1.0 and reference["max_abs_logit_diff"] == 0.0
    for (runtime, precision), row in rows.items():
        agreement = row["top1_agreement_with_torch_fp32"]
        assert 0.0 <= agreement <= 1.0, (runtime, precision)
        # only the images on which the two disagree can be right for one and wrong for the other
        assert abs(row["accuracy"] - reference["accuracy"]) <= 1 - agreement + 1e-9, (runtime, precision)
        assert (row["disagreeing_images"] == 0) == (agreement == 1.0)
    for backend in ("onnxruntime", "openvino"):
        report = result["quantize_reports"][backend]
        assert report["backend"] == backend and report["calibration"] == "the run's validation data"
        assert Path(report["report"]).parent == run / "runtime"
    written = json.loads((tmp_path / "results" / "int8_agreement.json").read_text())
    assert written["rows"] == json.loads(json.dumps(result["rows"]))
    assert "int8 against fp32" in (tmp_path / "results" / "int8_agreement.md").read_text().splitlines()[0]
