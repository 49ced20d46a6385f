"""--report-to: a tiny run feeds TensorBoard, trackio, wandb (offline) and MLflow (a local file store) the run record
and every scalar of metrics.jsonl, each read back through its own library; a tracker that raises does not stop the
run. Nothing reaches the network: each library's offline and telemetry-off switches are set."""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from megamlm.training.metrics_file import read_metrics

# trackio reads TRACKIO_DIR when it is first imported: its store goes to a temporary folder, not the user's cache.
if "trackio" not in sys.modules:
    os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="megamlm-trackio-")
pytest.importorskip("trackio")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

VALIDATION = ["--split", "969,30,1", "--eval-interval", "10", "--eval-iters", "1"]
RUN = ["--objective", "clm_then_mlm", "--switch", "0.5", "--train-iters", "20", "--log-interval", "5", *VALIDATION]


@pytest.fixture
def offline_stores(tmp_path, monkeypatch):
    """Each tracker's store in ``tmp_path``, offline, with telemetry off."""
    stores = {"wandb": tmp_path / "wandb", "mlflow": tmp_path / "mlruns"}
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": stores["wandb"],
                       "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false", "WANDB_DISABLE_GIT": "true",
                       "MLFLOW_TRACKING_URI": stores["mlflow"].as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true",
                       "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "HF_HUB_OFFLINE": "1",
                       "HF_HUB_DISABLE_TELEMETRY": "1"}.items():
        monkeypatch.setenv(key, str(value))
    stores["wandb"].mkdir()
    return stores


def expected_scalars(run_dir: Path) -> dict[tuple[int, str], float]:
    """{(step, "kind/field"): value} of every number in metrics.jsonl."""
    return {(r["step"], f"{r['kind']}/{k}"): v for r in read_metrics(run_dir) for k, v in r.items()
            if k not in ("kind", "step") and isinstance(v, (int, float)) and not isinstance(v, bool)}


def wandb_records(run_file: Path) -> list:
    """The records of a wandb run file (LevelDB's log format: 32 KiB blocks of chunks, each with a 7-byte header,
    after wandb's own 7-byte file header), parsed as wandb's protobuf Records."""
    from wandb.proto import wandb_internal_pb2

    data, block = run_file.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, pieces, records = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:  # the zero padding at a block's end
            pos += left
            continue
        pieces += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
            pieces = b""
    return records


def read_wandb(folder: Path) -> tuple[dict, dict, str]:
    """(scalars by (step, name), config, group) of the one offline run under ``folder``."""
    (run_file,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    scalars, config, group = {}, {}, None
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            for item in record.history.item:
                value = json.loads(item.value_json)
                if isinstance(value, (int, float)) and not (item.key or item.nested_key[0]).startswith("_"):
                    scalars[(record.history.step.num, item.key or "/".join(item.nested_key))] = value
        elif kind == "run":
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
            group = record.run.run_group
    return scalars, config, group


def assert_same(got: dict, want: dict, who: str) -> None:
    missing = sorted(set(want) - set(got))
    assert not missing, f"{who} lacks {missing[:5]}"
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (who, key)


def test_every_tracker_gets_the_record_and_every_scalar_of_the_metrics_file(tiny, tmp_path, offline_stores):
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from trackio.sqlite_storage import SQLiteStorage

    run_dir = tmp_path / "run"
    tiny(*RUN, "--save", run_dir, "--report-to", "trackio", "wandb", "mlflow", "tensorboard",
         "--tracker-group", "study-a", "--tracker-project", tmp_path.name)
    want = expected_scalars(run_dir)
    assert {"train/loss", "train/tokens_per_second", "validation/mlm_loss", "validation/clm_loss"} <= {
        name for _, name in want}
    config = json.loads((run_dir / "run_record.json").read_text())["config"]

    logs = SQLiteStorage.get_logs(tmp_path.name, "run")
    assert_same({(row["step"], k): v for row in logs for k, v in row.items() if k in {n for _, n in want}}, want,
                "trackio")
    trackio_config = SQLiteStorage.get_run_config(tmp_path.name, "run")
    assert trackio_config["config"] == config and trackio_config["_Group"] == "study-a"
    alerts = SQLiteStorage.get_alerts(tmp_path.name, run_name="run")
    assert any("objective switch before step 11: clm -> mlm" in (a.get("text") or "") for a in alerts)

    scalars, wandb_config, group = read_wandb(offline_stores["wandb"])
    assert_same(scalars, want, "wandb")
    assert wandb_config["config"] == config and group == "study-a"

    client = MlflowClient()
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("study-a").experiment_id])
    assert mlflow_run.data.params["training.train_iters"] == "20"
    assert mlflow_run.info.run_name == "run" and mlflow_run.info.status == "FINISHED"
    history = {(m.step, key): m.value for key in {n for _, n in want}
               for m in client.get_metric_history(mlflow_run.info.run_id, key)}
    assert_same(history, want, "mlflow")
    assert "objective switch" in mlflow_run.data.tags["event.step_0000011"]

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert_same({(e.step, tag): e.value for tag in events.Tags()["scalars"] for e in events.Scalars(tag)}, want,
                "tensorboard")
    assert "run_record/text_summary" in events.Tags()["tensors"]


def test_a_tracker_that_raises_warns_once_and_the_run_goes_on(tiny, tmp_path, offline_stores, monkeypatch, capsys):
    from megamlm.training import tracker_backends

    def no_network(self, run):
        raise ConnectionError("no route to api.wandb.ai\nsecond line")

    def full_disk(self, step, values):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracker_backends.WandbTracker, "start", no_network)
    monkeypatch.setattr(tracker_backends.MlflowTracker, "scalars", full_disk)
    result = tiny(*RUN, "--save", tmp_path / "run", "--report-to", "wandb", "mlflow", "trackio", "--tracker-project",
                  tmp_path.name)
    assert result.last_step == 20 and result.stop_reason is None
    out = capsys.readouterr().out
    assert out.count("the wandb tracker failed to start (ConnectionError: no route to api.wandb.ai)") == 1
    assert out.count("the mlflow tracker failed at step 5 (OSError:") == 1
    assert "second line" not in out
    assert [r["step"] for r in read_metrics(tmp_path / "run", kind="train")] == [5, 10, 15, 20]
    from trackio.sqlite_storage import SQLiteStorage

    logs = {row["step"] for row in SQLiteStorage.get_logs(tmp_path.name, "run")}
    assert {5, 10, 15, 20} <= logs  # the others went on


def wandb_runs(folder: Path) -> dict[str, dict]:
    """{run id: scalars by (step, name)} over every offline folder under ``folder`` (a resumed offline run is a
    second folder of the same id, which ``wandb sync`` adds to that run)."""
    runs: dict[str, dict] = {}
    for run_file in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        records = wandb_records(run_file)
        (run_id,) = {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"}
        scalars = runs.setdefault(run_id, {})
        for record in records:
            if record.WhichOneof("record_type") == "history":
                for item in record.history.item:
                    key = item.key or "/".join(item.nested_key)
                    if not key.startswith("_"):
                        assert (record.history.step.num, key) not in scalars, (run_id, key, record.history.step.num)
                        scalars[(record.history.step.num, key)] = json.loads(item.value_json)
    return runs


def once_each(pairs: list, who: str) -> list[int]:
    """The steps of ``train/loss`` in ``pairs`` [(step, name)], each there once."""
    steps = [step for step, name in pairs if name == "train/loss"]
    assert len(steps) == len(set(steps)), f"{who} repeats steps: {sorted(steps)}"
    return sorted(steps)


def test_a_resumed_run_continues_its_tracker_runs_and_a_branch_names_its_parent(tiny, tmp_path, offline_stores):
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from trackio.sqlite_storage import SQLiteStorage

    run_dir, project = tmp_path / "run", tmp_path.name
    trackers = ["--report-to", "trackio", "wandb", "mlflow", "tensorboard", "--tracker-project", project]
    flags = [*RUN, "--log-interval", "1", *trackers]
    # stops after step 12 with checkpoints at 10 and 12; step 12's checkpoint removed (a crash after step 12 was
    # logged, before its checkpoint was whole), so the relaunch resumes from step 10: steps 11-12 are in the tracker
    # runs already
    tiny(*flags, "--save", run_dir, "--save-at", "10", "--exit-interval", "12")
    first = json.loads((run_dir / "trackers.json").read_text())
    shutil.rmtree(run_dir / "iter_0000012")
    resumed = tiny(*flags, "--load", run_dir, "--save", run_dir)
    assert resumed.start == "resume" and resumed.start_step == 10 and resumed.last_step == 20
    assert json.loads((run_dir / "trackers.json").read_text()) == first  # the same tracker runs
    every = list(range(1, 21))
    assert once_each(list(expected_scalars(run_dir)), "metrics.jsonl") == every
    losses = {key: v for key, v in expected_scalars(run_dir).items() if key[1] == "train/loss"}  # bitwise on CPU

    assert SQLiteStorage.get_runs(project) == ["run"]
    logs = SQLiteStorage.get_logs(project, "run")
    assert once_each([(row["step"], k) for row in logs for k in row], "trackio") == every
    assert_same({(row["step"], "train/loss"): row["train/loss"] for row in logs if "train/loss" in row}, losses,
                "trackio")
    (scalars,) = wandb_runs(offline_stores["wandb"]).values()  # one run id over both launches
    assert once_each(list(scalars), "wandb") == every
    assert_same(scalars, losses, "wandb")
    client = MlflowClient()
    experiment = client.get_experiment_by_name(project).experiment_id
    (mlflow_run,) = client.search_runs([experiment])
    assert mlflow_run.info.status == "FINISHED"
    assert once_each([(m.step, "train/loss") for m in client.get_metric_history(mlflow_run.info.run_id,
                                                                                "train/loss")], "mlflow") == every
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert once_each([(e.step, "train/loss") for e in events.Scalars("train/loss")], "tensorboard") == every
    assert_same({(e.step, "train/loss"): e.value for e in events.Scalars("train/loss")}, losses, "tensorboard")

    branch_dir = tmp_path / "branch"
    tiny(*flags, "--load", run_dir / "iter_0000010", "--save", branch_dir)
    branch = json.loads((branch_dir / "trackers.json").read_text())
    assert branch["mlflow"]["run_id"] != first["mlflow"]["run_id"] and branch["wandb"]["id"] != first["wandb"]["id"]
    (child,) = [r for r in client.search_runs([experiment]) if r.info.run_name == "branch"]
    assert child.data.tags["megamlm.parent_run_id"] == first["mlflow"]["run_id"]
    assert child.data.tags["megamlm.parent_run"] == str(run_dir)
    assert sorted(SQLiteStorage.get_runs(project)) == ["branch", "run"]
    assert SQLiteStorage.get_run_config(project, "branch")["parent_trackio_run"]["name"] == "run"
    assert set(wandb_runs(offline_stores["wandb"])) == {first["wandb"]["id"], branch["wandb"]["id"]}
