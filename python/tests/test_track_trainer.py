"""The real trainer (build/dflash-train, configs/tiny.toml shrunk) with trackers on: killed with
SIGKILL after a checkpoint and resumed (metrics.jsonl cut back to the checkpoint's step, each
record once), TensorBoard and W&B (offline) hold every logged step once with metrics.jsonl's values; a tracker that fails is one warning and the run still finishes."""

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_track import check_tensorboard, check_wandb

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "build" / "dflash-train"

pytestmark = pytest.mark.skipif(not TRAIN.exists(), reason=f"{TRAIN} is not built (cmake --build build)")


def command(tmp, steps, *extra):
    data = tmp / "data"
    return [str(TRAIN), "--config", str(ROOT / "configs" / "tiny.toml"),
            f"--job.dump_folder={tmp / 'dump'}", f"--target.path={tmp / 'target'}",
            f"--data.train={data / 'train.jsonl'}", f"--data.eval={data / 'eval.jsonl'}",
            "--data.synthetic.train_sequences=64", "--data.synthetic.eval_sequences=4",
            f"--eval.spec_prompts={data / 'eval.jsonl'}", "--eval.spec_max_new_tokens=16",
            f"--training.steps={steps}", "--metrics.log_every=1", "--runtime.cpu_workers=1",
            "--metrics.progress=false", "--metrics.wandb_mode=offline", *extra]


def records(dump, growing=False):
    """metrics.jsonl's records. While the trainer runs, a read may land in the middle of an append, and a
    SIGKILL may cut one short (the resume repairs it): growing leaves a last line without its newline out.
    Once a run has ended by itself, there is none."""
    text = (dump / "metrics.jsonl").read_text()
    if growing:
        text = text[:text.rfind("\n") + 1]
    assert text == "" or text.endswith("\n"), f"metrics.jsonl ends in a torn line: {text[-200:]!r}"
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def train_steps(recs):
    return [r["step"] for r in recs if "eval" not in r]


def wait_for_followers(dump, timeout=60):
    """Until no `dflash-data track` holds the dump folder's lock (the last one has finished)."""
    end = time.time() + timeout
    with open(dump / "trackers" / "lock", "a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                assert time.time() < end, "dflash-data track did not finish"
                time.sleep(0.1)


def test_killed_and_resumed_run_gives_each_tracker_every_step_once(tmp_path):
    dump = tmp_path / "dump"
    cmd = command(tmp_path, 120, "--checkpoint.every=20", "--training.eval_every=30", "--eval.spec_every=60",
                  "--metrics.trackers=tensorboard,wandb")
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    end = time.time() + 120
    # Kill it after the checkpoint at step 20 and the eval at step 30 are written, before the end.
    while first.poll() is None and time.time() < end:
        if (dump / "metrics.jsonl").exists() and max(train_steps(records(dump, growing=True)), default=0) >= 35:
            first.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    assert first.wait(timeout=30) == -signal.SIGKILL, (tmp_path / "first.log").read_text()
    # A kill can land inside an append and leave a torn last line; the resume repairs it.
    killed_at = max(train_steps(records(dump, growing=True)))
    assert 35 <= killed_at < 120, f"killed at step {killed_at}: too late to test a resume"
    assert (dump / "checkpoints" / "step-20").is_dir()

    before = records(dump, growing=True)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resumed from" in second.stdout
    assert "warning" not in second.stderr, second.stderr
    wait_for_followers(dump)

    recs = records(dump)
    steps = train_steps(recs)
    assert "metrics.jsonl: removed " in second.stdout  # the records after the checkpoint, cut on resume
    assert sorted(steps) == list(range(1, 121))  # each step once
    evals = {(r["eval"], r["step"]) for r in recs if "eval" in r}
    assert ("eval at step 30", 30) in evals and ("spec_tau after training", 120) in evals
    # Records logged again after the resume repeat the killed run's (timings aside): bitwise-equal
    # resumes, so the trackers, which had the killed run's, hold the file's values.
    first_seen = {}
    for r in before + recs:
        key = (r.get("eval"), r["step"])
        kept = {k: v for k, v in r.items() if k not in ("step_ms", "tokens_per_s")}
        assert first_seen.setdefault(key, kept) == kept, key
    assert len({(r.get("eval"), r["step"]) for r in recs}) == len(recs)
    check_tensorboard(dump, recs)
    rows = check_wandb(dump, recs)
    state = json.loads((dump / "trackers" / "state.json").read_text())
    assert {row["_run_id"] for row in rows} == {state["run_id"]}
    assert len(list((dump / "wandb").glob("offline-run-*"))) == 2  # one W&B run, continued
    assert len(list((dump / "tensorboard").iterdir())) == 1
    config = json.loads((dump / "trackers" / "config.json").read_text())
    assert config["training"]["steps"] == 120 and config["metrics"]["trackers"] == ["tensorboard", "wandb"]


def test_a_tracker_that_fails_is_one_warning_and_the_run_finishes(tmp_path):
    broken = tmp_path / "broken" / "wandb"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("wandb is broken here on purpose")\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "broken"))
    cmd = command(tmp_path, 30, "--checkpoint.every=10", "--training.eval_every=10",
                  "--metrics.trackers=wandb,tensorboard")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, r.stderr
    assert "tracker wandb could not start (ImportError: wandb is broken here on purpose); it is dropped" in warnings[0]
    dump = tmp_path / "dump"
    wait_for_followers(dump)
    recs = records(dump)
    assert train_steps(recs) == list(range(1, 31))
    check_tensorboard(dump, recs)
    assert not (dump / "wandb").exists()
