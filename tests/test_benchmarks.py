"""The benchmark harness works: structure of its records and JSON, never its times."""

import json
import os
import subprocess
import sys

import pytest

from keras_vit.hardware import cpu as cpu_lib
from keras_vit.hardware.onednn import ONEDNN_VARIABLE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import cli, common, plan, report  # noqa: E402

FIELDS = set(common.RECORD_FIELDS)


def _run(tmp_path, *argv):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out), *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_b16_forward_is_35_1_gflop():
    assert common.forward_macs("B/16") / 1e9 == pytest.approx(17.56, abs=0.01)
    assert common.forward_gflop("B/16") == pytest.approx(35.1, abs=0.05)
    assert common.forward_gflop("S/16") == pytest.approx(9.2, abs=0.05)


def test_plan_covers_every_section_and_peer():
    args = cli.build_parser().parse_args([])
    names = [t["name"] for t in plan.build(args)]
    for expected in (
        "limit/-/tf-xla/float32", "limit/-/tf-graph/bfloat16", "limit/-/numpy/float32", "limit/-/torch/float32",
        "inference/B16/keras-predict/float32/b1", "inference/B16/keras-xla/bfloat16/b32",
        "inference/S16/keras-function/float32/b8", "inference/B16/timm/float32/b8",
        "inference/B16/keras-hub-xla/float32/b8", "export/B16/tflite-int8/int8/b1",
        "export/B16/saved-model/float32/b8", "export/B16/onnxruntime/float32/b8",
        "training/S16/keras-fit-xla/bfloat16/b16", "training/S16/timm/float32/b16", "training/main/keras-fit/float32/b128",
    ):
        assert expected in names
    assert len(names) == len(set(names))
    gpu = plan.build(cli.build_parser().parse_args(["--gpu"]))
    assert {t["runtime"] for t in gpu} == {"keras-xla", "timm-compile", "keras-fit-xla"}


def test_bad_arguments_name_the_value():
    with pytest.raises(SystemExit, match="unknown section"):
        cli.main(["--only", "inferense"])
    with pytest.raises(SystemExit, match="'L/99'"):
        cli.main(["--models", "L/99", "--list"])


def test_gpu_mode_fails_clearly_without_a_gpu(capsys):
    # conftest hides GPUs (CUDA_VISIBLE_DEVICES=""), which gpu_available reads without starting TensorFlow
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        pytest.skip("GPUs may be visible: CUDA_VISIBLE_DEVICES is not empty")
    assert cli.main(["--gpu", "--quick"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_report_fractions_and_bars_from_records():
    records = [
        {"section": "limit", "name": "l", "precision": "float32", "status": "ok", "gflops_per_second": 100.0},
        {"section": "limit", "name": "l2", "precision": "bfloat16", "status": "ok", "gflops_per_second": 200.0},
        {"section": "inference", "model": "B/16", "runtime": "keras-xla", "precision": "float32", "batch_size": 8,
         "status": "ok", "images_per_second": 2.0},
        {"section": "inference", "model": "B/16", "runtime": "timm", "precision": "float32", "batch_size": 8,
         "status": "ok", "images_per_second": 1.0},
        {"section": "inference", "model": "B/16", "runtime": "keras-hub", "precision": "float32", "batch_size": 8,
         "status": "ok", "images_per_second": 1.6},
        {"section": "inference", "model": "B/16", "runtime": "keras-hub-xla", "precision": "float32", "batch_size": 8,
         "status": "ok", "images_per_second": 2.5},
    ]
    limit = report.limits(records)
    report.add_fractions(records, limit)
    assert records[2]["fraction_of_limit"] == pytest.approx(2.0 * 35.12 / 100, abs=0.01)
    bars = {b["bar"]: b for b in report.bars(records, limit)}
    # exact on purpose: a bar's value is round(ratio, 3), the float nearest the 3-decimal number (CPython's
    # round and IEEE division are correctly rounded on every CPU): 2.0 / 1.0 -> 2.0, 2.0 / 2.5 -> 0.8
    assert bars["B/16 float32 b8: Keras / timm"]["value"] == 2.0
    assert bars["B/16 float32 b8: Keras / timm"]["met"] is True
    hub = bars["B/16 float32 b8: keras_vit / keras-hub (best runtime of each)"]
    assert hub["value"] == 0.8 and hub["met"] is False  # keras-hub's best runtime (XLA) is the one compared
    assert bars["B/16 bfloat16 b8: keras_vit / keras-hub (best runtime of each)"]["met"] is None
    assert bars["S/16 training: Keras / timm images/s"]["met"] is None  # not measured: not claimed


@pytest.mark.slow  # make test-slow: over 9 s on 2 cores; the same path is tested fast elsewhere
def test_quick_run_in_process_writes_every_record(tmp_path):
    data, stdout = _run(tmp_path, "--in-process", "--no-peers", "--only", "limit,inference,training",
                        "--precisions", "float32,bfloat16", "--batch-sizes", "1",
                        "--filter", "tf-graph,keras-function,keras-fit/", "--repeat", "2")
    records = data["records"]
    assert {r["section"] for r in records} == {"limit", "inference", "training"}
    for r in records:
        assert FIELDS <= set(r), r
        assert r["status"] == "ok", r
    inference = [r for r in records if r["section"] != "limit"]
    assert all(r["images_per_second"] > 0 and r["latency_ms"] > 0 and r["peak_memory_mb"] > 0 for r in inference)
    assert {r["precision"] for r in inference} == {"float32", "bfloat16"}
    paired = [r for r in inference if r["runtime"] == "keras-function-paired"]
    assert len(paired) == 1 and paired[0]["speedup_over_float32"] > 0 and paired[0]["float32_images_per_second"] > 0
    assert all(len(r["repeats"]) == 2 for r in inference)
    assert all(r["gflops_per_second"] > 0 for r in records if r["section"] == "limit")
    assert set(data["limit_gflops_per_second"]) == {"float32", "bfloat16"}
    assert all("fraction_of_limit" in r for r in records)
    machine = data["machine"]
    assert machine["cpus"] == os.cpu_count() and machine["cpu_isa"] in ("AVX-512", "AVX2", "other")
    assert set(machine["cpu_flags"]) <= set(cpu_lib.CPU_FLAGS) and machine["cpu"]
    assert machine["versions"]["tensorflow"].startswith("2.") and machine["versions"]["keras"].startswith("3.")
    assert "| measurement |" in stdout and "| bar |" in stdout


def test_quick_subprocess_measurement_and_missing_peer_is_skipped(tmp_path):
    data, _ = _run(tmp_path, "--only", "inference", "--batch-sizes", "2", "--precisions", "float32",
                   "--runtimes", "keras-xla", "--peers-python", str(tmp_path / "no-python"))
    by_runtime = {r["runtime"]: r for r in data["records"]}
    assert by_runtime["keras-xla"]["status"] == "ok" and by_runtime["keras-xla"]["batch_size"] == 2
    assert "in_process" not in by_runtime["keras-xla"]
    assert by_runtime["timm"]["status"] == "skipped" and "make peers" in by_runtime["timm"]["reason"]


@pytest.mark.slow
def test_quick_exports_run_in_their_runtimes(tmp_path):
    data, _ = _run(tmp_path, "--only", "export", "--no-peers")
    records = data["records"]
    assert {r["runtime"] for r in records} == {"saved-model", "tflite-float32", "tflite-float16", "tflite-dynamic",
                                               "tflite-int8", "onnxruntime"}
    for r in records:
        assert r["status"] == "ok", r
        assert r["size_bytes"] > 0 and r["images_per_second"] > 0


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(cli.DEFAULT_PEERS), reason="no peer environment (make peers)")
def test_quick_peers_run(tmp_path):
    data, _ = _run(tmp_path, "--only", "inference,training", "--precisions", "float32", "--batch-sizes", "1",
                   "--filter", "timm,keras-hub")
    assert {r["runtime"] for r in data["records"]} == {"timm", "keras-hub", "keras-hub-xla"}
    assert all(r["status"] == "ok" and r["images_per_second"] > 0 for r in data["records"])


def test_repeats_collapse_to_the_median_run():
    rows = [{"name": "a", "status": "ok", "images_per_second": v} for v in (3.0, 1.0, 2.0)]
    rows.append({"name": "b", "status": "ok", "images_per_second": 5.0})
    collapsed = {r["name"]: r for r in cli.collapse_repeats(rows)}  # the median run is picked, not computed: exact
    assert collapsed["a"]["images_per_second"] == 2.0 and sorted(collapsed["a"]["repeats"]) == [1.0, 2.0, 3.0]
    assert "repeats" not in collapsed["b"]
    names = [t["name"] for t in plan.build(cli.build_parser().parse_args(["--only", "inference", "--precisions",
                                                                          "float32,bfloat16-weights"]))]
    assert "inference/B16/keras-function-paired/bfloat16-weights/b8" in names


def test_profile_sums_op_time_by_type(capsys):
    from benchmarks import profile

    assert profile.main(["--model", "main", "--batch-size", "2", "--calls", "1", "--match", "transformer_block"]) == 0
    out = capsys.readouterr().out
    assert "main inference, batch 2, float32" in out
    assert "MatMul" in out  # the model's GEMMs show up by op type
    matched = [line for line in out.splitlines() if "ops named *transformer_block*" in line]
    assert len(matched) == 1 and float(matched[0].split(":")[1].split("ms")[0]) > 0


def test_machine_records_the_onednn_state_keras_vit_ran_with(monkeypatch):
    avx2 = cpu_lib.CPU("AMD EPYC 7702", 2, frozenset({"avx2", "fma"}))
    monkeypatch.setattr(cpu_lib, "cpu_info", lambda *a, **k: avx2)
    monkeypatch.delenv(ONEDNN_VARIABLE, raising=False)
    assert cli.machine()["onednn"] == "1"  # what run_task and the keras-vit command set on an AVX2-only CPU
    monkeypatch.setenv(ONEDNN_VARIABLE, "0")
    assert cli.machine()["onednn"] == "0"  # the user's value wins, there and here
    monkeypatch.delenv(ONEDNN_VARIABLE)
    monkeypatch.setattr(cpu_lib, "cpu_info", lambda *a, **k: cpu_lib.CPU("AMD EPYC 9B14", 2, frozenset({"avx2", "avx512f", "avx512_vnni"})))
    assert cli.machine()["onednn"] == "default"  # TensorFlow turns it on by itself


def test_gpu_ratios_pair_keras_vit_with_timm_keras_hub_and_the_jitted_step():
    from benchmarks import gpu_jax

    def row(framework, mode, ips, variant="default"):
        return {"framework": framework, "model": "B/16", "mode": mode, "batch_size": 128, "memory_test": False,
                "variant": variant, "status": "ok", "images_per_second": ips, "peak_memory_mb": 1.0}

    records = [row("keras", "train", 200.0), row("timm", "train", 400.0), row("kerashub", "train", 250.0),
               row("keras", "fit", 180.0), row("kerashub", "fit", 100.0), row("keras", "train", 999.0, "always"),
               dict(row("kerashub", "predict", 0.0), status="skipped")]
    got = {(r["name"], r["mode"]): r["ratio"] for r in gpu_jax.ratios(records)}
    assert got == pytest.approx({("keras_vit_over_timm", "train"): 0.5, ("keras_vit_over_keras_hub", "train"): 0.8,
                                 ("keras_vit_over_keras_hub", "fit"): 1.8, ("keras_vit_fit_over_jitted_train", "fit"): 0.9,
                                 ("keras_hub_fit_over_jitted_train", "fit"): 0.4})


@pytest.mark.slow
def test_gpu_script_tiny_runs_fit_and_predict_beside_the_jitted_step(tmp_path):
    pytest.importorskip("jax")
    out = tmp_path / "gpu.json"
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "benchmarks/gpu_jax.py", "--tiny", "--frameworks", "keras,kerashub",
                           "--modes", "train,fit", "--attention", "always", "--train-batch-sizes", "4",
                           "--fit-steps", "4", "--steps-per-execution", "2", "--repeats", "2", "--min-time", "0.05",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    keras_rows = {r["mode"]: r for r in result["records"] if r["framework"] == "keras"}
    assert {m: r["status"] for m, r in keras_rows.items()} == {"train": "ok", "fit": "ok"}
    assert keras_rows["fit"]["input_dtype"] == "uint8" and keras_rows["fit"]["steps_per_execution"] == 2
    assert keras_rows["fit"]["attention_check"]["attention_padding"] == "always" and keras_rows["fit"]["finite"]
    for r in (r for r in result["records"] if r["framework"] == "kerashub"):  # ok, or skipped saying why
        assert r["status"] == "ok" or "keras-hub is not importable" in r["skipped"], r
