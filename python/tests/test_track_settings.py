"""`dflash-data track` takes its settings from the trainer's resolved config
(<dump_folder>/trackers/config.json) when no flag gives them: metrics.trackers picks the trackers,
metrics.run_name (else job.name) names TensorBoard's run folder, and metrics.wandb_project,
wandb_entity, run_name and wandb_mode reach the W&B run (offline: no network, no account)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from dflash_data.track_wandb import read_records

DFLASH_DATA = Path(sys.executable).with_name("dflash-data")

RECORD = {"step": 1, "loss": 4.5, "accuracy": 0.25, "tau": 1.5, "grad_norm": 0.75, "lr": 1e-3, "tokens": 96}


def prepare(dump, job_name, metrics):
    """A dump folder with one step record and the resolved config the trainer writes."""
    (dump / "trackers").mkdir(parents=True)
    (dump / "metrics.jsonl").write_text(json.dumps(RECORD) + "\n")
    config = {"job": {"name": job_name}, "metrics": metrics}
    (dump / "trackers" / "config.json").write_text(json.dumps(config))


def follow(dump, home):
    """`dflash-data track` without any setting flag, and without W&B's own environment variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(home), WANDB_SILENT="true")
    cmd = [str(DFLASH_DATA), "track", "--dump-folder", str(dump)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_run_name_from_the_config_names_the_tensorboard_run_else_job_name(tmp_path):
    named = tmp_path / "named"
    prepare(named, "the-job", {"trackers": ["tensorboard"], "run_name": "from-config"})
    r = follow(named, tmp_path)
    assert r.returncode == 0, r.stderr
    folders = [p.name for p in (named / "tensorboard").iterdir()]
    assert len(folders) == 1 and folders[0].startswith("from-config-"), folders
    unnamed = tmp_path / "unnamed"
    prepare(unnamed, "the-job", {"trackers": ["tensorboard"], "run_name": ""})
    r = follow(unnamed, tmp_path)
    assert r.returncode == 0, r.stderr
    folders = [p.name for p in (unnamed / "tensorboard").iterdir()]
    assert len(folders) == 1 and folders[0].startswith("the-job-"), folders


def test_wandb_project_entity_run_name_and_mode_from_the_config_reach_the_run(tmp_path):
    dump = tmp_path / "dump"
    prepare(dump, "the-job", {"trackers": ["wandb"], "run_name": "run-z", "wandb_project": "project-x",
                              "wandb_entity": "team-y", "wandb_mode": "offline"})
    r = follow(dump, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr  # online without an account would be one warning
    runs = sorted((dump / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, runs
    run = next(rec.run for rec in read_records(runs[0]) if rec.WhichOneof("record_type") == "run")
    assert run.project == "project-x"
    assert run.entity == "team-y"
    assert run.display_name == "run-z"
