"""`dflash-data track` on hand-written metrics.jsonl files: record kinds and scalar names, whole
lines only, each (kind, step) once per tracker across followers, new runs on --restart-at, a
tracker that fails dropped with one warning, and TensorBoard's and W&B's own readers holding the
file's values (W&B offline, no network)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_data import track
from dflash_data.track_wandb import read_offline_run

DFLASH_DATA = Path(sys.executable).with_name("dflash-data")

TRAIN = {"step": 1, "loss": 4.5, "accuracy": 0.25, "tau": 1.5, "grad_norm": 0.75, "lr": 1e-3, "tokens": 96,
         "tokens_per_s": 1234.5, "step_ms": 7.25, "bucket": "32+64", "memory_mib": 3.0}
EVAL = {"loss": 5.0, "accuracy": 0.125, "tau": 1.0625, "blocks": 158, "tokens": 1106, "sequences": 4}
SPEC = {"spec_tau": 1.25, "spec_tau_micro": 1.125, "spec_accept_length": 2.5, "spec_histogram": [3, 1],
        "spec_rounds": 59}


def records(steps, evals=(), specs=()):
    """Training records for `steps`, eval and spec records at their steps, in the trainer's order."""
    out = []
    for s in sorted(set(steps) | set(evals) | set(specs)):
        if s in steps:
            out.append(dict(TRAIN, step=s, loss=4.5 - s / 64, lr=1e-3 * s))
        if s in evals:
            out.append(dict(EVAL, eval=f"eval at step {s}", step=s, loss=5.0 - s / 128))
        if s in specs:
            out.append(dict(SPEC, eval=f"spec_tau at step {s}", step=s, spec_tau=1.0 + s / 256))
    return out


def write(dump, recs, mode="a", partial=""):
    dump.mkdir(parents=True, exist_ok=True)
    with open(dump / "metrics.jsonl", mode) as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
        f.write(partial)


def follow(dump, *extra, env=None):
    """Runs `dflash-data track` (no parent: it forwards what the file holds and exits)."""
    cmd = [str(DFLASH_DATA), "track", "--dump-folder", str(dump), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def tensorboard_scalars(dump):
    """{tag: [(step, value)]} over every TensorBoard run folder of the dump folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for folder in sorted((dump / "tensorboard").iterdir()):
        acc = EventAccumulator(str(folder))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def wandb_rows(dump):
    """Every history row of every offline W&B run under the dump folder, with its run id."""
    rows = []
    for path in sorted((dump / "wandb").glob("offline-run-*/run-*.wandb")):
        run = read_offline_run(path)
        rows += [dict(row, _run_id=run["run_id"]) for row in run["history"]]
    return rows


def expected(recs):
    """{tag: {step: value}} as the follower names metrics.jsonl's scalars (first record wins)."""
    out = {}
    for r in recs:
        kind, step, scalars = track.classify(r)
        for tag, value in scalars.items():
            out.setdefault(tag, {}).setdefault(step, value)
    return out


def check_tensorboard(dump, recs):
    got = tensorboard_scalars(dump)
    want = expected(recs)
    assert set(got) == set(want)
    for tag, points in got.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), f"{tag}: steps {steps} not each once, in order"
        assert set(steps) == set(want[tag]), tag
        for step, value in points:
            assert value == pytest.approx(want[tag][step], rel=1e-6), (tag, step)


def check_wandb(dump, recs):
    rows = wandb_rows(dump)
    want = expected(recs)
    seen = {}
    for row in rows:
        for tag, value in row.items():
            if tag in want:
                key = (tag, row["step"])
                assert key not in seen, f"{tag} at step {row['step']} logged twice"
                seen[key] = value
                assert value == pytest.approx(want[tag][row["step"]], rel=1e-12), key
    assert set(seen) == {(tag, s) for tag, steps in want.items() for s in steps}
    return rows


def test_classify_names_kinds_and_scalars():
    kind, step, scalars = track.classify(dict(TRAIN, step=7))
    assert (kind, step) == ("train", 7)
    assert scalars["train/loss"] == 4.5 and scalars["train/tokens"] == 96
    assert "train/bucket" not in scalars and "train/step" not in scalars
    kind, _, scalars = track.classify(dict(EVAL, eval="eval before training", step=0))
    assert kind == "eval" and scalars["eval/tau"] == 1.0625 and "eval/eval" not in scalars
    kind, _, scalars = track.classify(dict(SPEC, eval="spec_tau after training", step=40))
    assert kind == "spec"
    assert scalars == {"spec/tau": 1.25, "spec/tau_micro": 1.125, "spec/accept_length": 2.5, "spec/rounds": 59}
    assert track.classify({"loss": 1.0}) is None
    assert track.classify({"step": True, "loss": 1.0}) is None
    assert track.classify({"step": 3, "loss": None, "ok": True})[2] == {}


def test_line_reader_waits_for_a_partial_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    reader = track.LineReader(path, 0)
    assert reader.read() == []
    path.write_text('{"step": 1}\n{"step": 2')
    assert reader.read() == ['{"step": 1}']
    assert reader.read() == []
    with open(path, "a") as f:
        f.write(', "loss": 1.5}\n{"step": 3}\n')
    assert reader.read() == ['{"step": 2, "loss": 1.5}', '{"step": 3}']


def test_tensorboard_and_wandb_hold_the_file_values_each_step_once_across_followers(tmp_path):
    dump = tmp_path / "dump"
    first = records(range(1, 11), evals=(0, 5, 10), specs=(0, 10))
    step11 = json.dumps(records([11])[0])
    write(dump, first, partial=step11[:20])  # the trainer is writing step 11
    both = ["--trackers", "tensorboard,wandb", "--wandb-mode", "offline"]
    r = follow(dump, *both)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    assert json.loads((dump / "trackers" / "state.json").read_text())["trackers"]["wandb"]["last_step"] == \
        {"train": 10, "eval": 10, "spec": 10}
    # The line completes; then a resumed trainer re-logs steps 6..11 (same values) and goes on.
    again = records(range(6, 16), evals=(10, 15), specs=(15,))
    with open(dump / "metrics.jsonl", "a") as f:
        f.write(step11[20:] + "\n")
    write(dump, again)
    r = follow(dump, *both)
    assert r.returncode == 0, r.stderr
    everything = first + again
    state = json.loads((dump / "trackers" / "state.json").read_text())
    for name in ("tensorboard", "wandb"):
        assert state["trackers"][name]["last_step"] == {"train": 15, "eval": 15, "spec": 15}
    check_tensorboard(dump, everything)
    rows = check_wandb(dump, everything)
    assert {row["_run_id"] for row in rows} == {state["run_id"]}
    assert len(list((dump / "wandb").glob("offline-run-*"))) == 2  # one run, continued


def test_restart_at_starts_new_runs_from_that_offset(tmp_path):
    dump = tmp_path / "dump"
    write(dump, records(range(1, 6)))
    assert follow(dump, "--trackers", "tensorboard").returncode == 0
    old = json.loads((dump / "trackers" / "state.json").read_text())["run_id"]
    offset = (dump / "metrics.jsonl").stat().st_size
    fresh = records(range(1, 4))
    write(dump, fresh)
    assert follow(dump, "--trackers", "tensorboard", "--restart-at", str(offset)).returncode == 0
    state = json.loads((dump / "trackers" / "state.json").read_text())
    assert state["run_id"] != old and state["offset"] == offset
    folders = sorted(p.name for p in (dump / "tensorboard").iterdir())
    assert len(folders) == 2
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(dump / "tensorboard" / state["trackers"]["tensorboard"]["folder"]))
    acc.Reload()
    assert [(e.step, pytest.approx(e.value)) for e in acc.Scalars("train/loss")] == \
        [(r["step"], r["loss"]) for r in fresh]


def test_a_file_cut_back_on_resume_is_followed_each_step_once(tmp_path):
    # The trainer resumed from step 6: the records after it (and a torn line) were cut, then the
    # same steps were written again with the same values and the run went on.
    dump = tmp_path / "dump"
    first = records(range(1, 11), evals=(5, 10))
    write(dump, first, partial='{"step": 11, "lo')
    assert follow(dump, "--trackers", "tensorboard").returncode == 0
    kept = records(range(1, 7), evals=(5,))
    write(dump, kept, mode="w")
    again = records(range(7, 16), evals=(10, 15))
    write(dump, again)
    r = follow(dump, "--trackers", "tensorboard")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    state = json.loads((dump / "trackers" / "state.json").read_text())
    assert state["trackers"]["tensorboard"]["last_step"] == {"train": 15, "eval": 15}
    check_tensorboard(dump, kept + again)


def test_line_start_backs_a_stale_offset_to_a_whole_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert track.line_start(path, 40) == 0
    path.write_text('{"step": 1}\n{"step": 2}\n')
    assert track.line_start(path, 0) == 0
    assert track.line_start(path, 12) == 12
    assert track.line_start(path, 15) == 12
    assert track.line_start(path, 24) == 24
    assert track.line_start(path, 100) == 24


def test_a_tracker_that_cannot_start_is_one_warning_and_the_others_go_on(tmp_path):
    dump = tmp_path / "dump"
    recs = records(range(1, 6), evals=(5,))
    write(dump, recs)
    broken = tmp_path / "broken" / "wandb"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("wandb is broken here on purpose")\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "broken"))
    r = follow(dump, "--trackers", "wandb,tensorboard", env=env)
    assert r.returncode == 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("warning: dflash-data track: tracker wandb could not start (ImportError: wandb is "
                               "broken here on purpose); it is dropped")
    check_tensorboard(dump, recs)


def test_wandb_online_without_an_api_key_is_one_warning(tmp_path):
    dump = tmp_path / "dump"
    recs = records(range(1, 4))
    write(dump, recs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_SILENT="true")  # no ~/.netrc, no W&B settings: no key
    r = follow(dump, "--trackers", "tensorboard,wandb", "--wandb-mode", "online", env=env)
    assert r.returncode == 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1, r.stderr
    assert "tracker wandb could not start" in lines[0]
    check_tensorboard(dump, recs)


def test_a_tracker_that_fails_while_logging_is_dropped_with_one_warning(tmp_path, monkeypatch, capsys):
    dump = tmp_path / "dump"
    recs = records(range(1, 6))
    write(dump, recs)

    class Failing:
        def __init__(self, ctx):
            self.logged = 0

        def log(self, step, scalars):
            if step == 3:
                raise ConnectionError("the server went away")

        def flush(self):
            pass

        def close(self):
            pass

    import dflash_data.track_wandb as track_wandb

    monkeypatch.setattr(track_wandb, "WandbTracker", Failing)
    parser = track.argparse.ArgumentParser()
    track.register(parser.add_subparsers())
    args = parser.parse_args(["track", "--dump-folder", str(dump), "--trackers", "wandb,tensorboard"])
    assert args.run(args) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert err == ["warning: dflash-data track: tracker wandb failed while logging step 3 (ConnectionError: the "
                   "server went away); it is dropped, training, metrics.jsonl and the other trackers go on"]
    state = json.loads((dump / "trackers" / "state.json").read_text())
    assert state["trackers"]["wandb"]["last_step"] == {"train": 2}
    check_tensorboard(dump, recs)


def test_no_trackers_is_a_usage_error(tmp_path):
    write(tmp_path / "dump", records([1]))
    r = follow(tmp_path / "dump")
    assert r.returncode == 2
    assert "no trackers: name them in the config's metrics.trackers or with --trackers" in r.stderr
    r = follow(tmp_path / "dump", "--trackers", "mlflow")
    assert r.returncode == 2 and "unknown tracker mlflow" in r.stderr
