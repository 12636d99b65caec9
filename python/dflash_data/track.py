"""`dflash-data track`: follows a training run's metrics.jsonl and feeds every record to the
experiment trackers (TensorBoard, Weights & Biases) that its config's [metrics] trackers names.

dflash-train starts it (train/trackers.h) with --parent-pid: it then follows the file like
`tail -f` (whole lines only) until the trainer ends or dies, forwards the rest, and exits. Run by
hand without --parent-pid, it forwards what the file holds and exits.

Invariants:
- metrics.jsonl is the source of truth; nothing here ever writes to it or slows the trainer.
- Each tracker receives each (kind, step) once: <dump_folder>/trackers/state.json keeps, per
  tracker, the last step forwarded of each kind (train, eval, spec) and the tracker run's id, and
  records at or before those steps are dropped (a resumed trainer re-logs the steps after its
  checkpoint, with the same values). One follower at a time holds <dump_folder>/trackers/lock.
- A tracker that fails is dropped after one warning line on stderr; the others go on.
"""

import argparse
import fcntl
import json
import os
import random
import re
import select
import signal
import stat
import string
import sys
import threading
import time
from pathlib import Path

KINDS = ("train", "eval", "spec")
TRACKERS = ("tensorboard", "wandb")


def warn(message):
    """One warning line on stderr, which the trainer's log shares."""
    print("warning: dflash-data track: " + " ".join(str(message).split()), file=sys.stderr, flush=True)


def classify(record):
    """A metrics.jsonl record as (kind, step, {name: number}), or None when it has no step.

    Training records have no "eval" key; eval and spec records name what was measured in
    "eval" ("eval at step 20", "spec_tau after training"). Every numeric field but the step
    becomes a scalar named kind/field ("train/loss", "eval/tau"); spec fields lose their
    "spec_" prefix ("spec/tau"). Strings, lists and nulls (NaN in JSON) are not scalars.
    """
    if not isinstance(record, dict):
        return None
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    label = record.get("eval")
    if label is None:
        kind = "train"
    elif str(label).startswith("spec") or any(k.startswith("spec_") for k in record):
        kind = "spec"
    else:
        kind = "eval"
    scalars = {}
    for key, value in record.items():
        if key in ("step", "eval") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = key[len("spec_"):] if kind == "spec" and key.startswith("spec_") else key
        scalars[f"{kind}/{name}"] = value
    return kind, step, scalars


def flatten(config, prefix=""):
    """{"training": {"lr": 1e-3}} -> {"training.lr": 1e-3}; lists stay values."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class LineReader:
    """The complete lines of a growing file from a byte offset on; a partial last line waits."""

    def __init__(self, path, offset):
        self.path = Path(path)
        self.offset = offset

    def read(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return data[:end].decode("utf-8", errors="replace").split("\n")


def line_start(path, offset):
    """Where the line holding byte `offset` of `path` begins (the file's end when it is shorter).
    A resumed trainer cuts metrics.jsonl back to its checkpoint's step, so a tracker run's start
    offset may lie past the end or inside a line written since; reading from the line's start
    re-reads records the trackers had, which their (kind, step) skips."""
    try:
        with open(path, "rb") as f:
            data = f.read(offset)
    except FileNotFoundError:
        return 0
    return data.rfind(b"\n") + 1


class Ending:
    """Whether the run being followed has ended: the trainer gone (its pipe on our stdin closed, or
    our parent changed) or a SIGTERM/SIGINT asked us to finish. Without a parent pid: at once."""

    def __init__(self, parent_pid):
        self.parent_pid = parent_pid
        self.signalled = False
        try:
            self.pipe = bool(parent_pid) and stat.S_ISFIFO(os.fstat(0).st_mode)
        except OSError:  # no stdin at all
            self.pipe = False
        self.previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame):
        self.signalled = True

    def ended(self):
        if self.signalled or not self.parent_pid or os.getppid() != self.parent_pid:
            return True
        if self.pipe:
            readable, _, _ = select.select([0], [], [], 0)
            if readable and not os.read(0, 4096):
                return True
        return False

    def wait(self, seconds):
        """Sleeps up to `seconds`, less when the trainer's pipe closes."""
        if self.pipe and not self.signalled:
            try:
                select.select([0], [], [], seconds)
            except InterruptedError:
                pass
        else:
            time.sleep(seconds)


def new_run_id():
    return "".join(random.SystemRandom().choice(string.ascii_lowercase + string.digits) for _ in range(8))


class State:
    """<dump_folder>/trackers/state.json: the tracker run's id, where its records begin in
    metrics.jsonl, and per tracker the last step forwarded of each kind (written atomically)."""

    def __init__(self, path, restart_at):
        self.path = Path(path)
        data = None
        if restart_at is None and self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                if not isinstance(data.get("run_id"), str) or not isinstance(data.get("trackers"), dict):
                    raise ValueError("no run_id or trackers")
            except (OSError, ValueError, AttributeError) as e:
                warn(f"{self.path} is unreadable ({e}); starting new tracker runs (steps already sent may repeat)")
                data = None
        if data is None:
            data = {"run_id": new_run_id(), "offset": restart_at or 0, "trackers": {}}
        self.data = data

    @property
    def run_id(self):
        return self.data["run_id"]

    @property
    def offset(self):
        return int(self.data.get("offset", 0))

    def tracker(self, name):
        """This tracker's entry: {"last_step": {kind: step}, ...}; created empty when new."""
        entry = self.data["trackers"].setdefault(name, {})
        entry.setdefault("last_step", {})
        return entry

    def save(self):
        tmp = self.path.with_name(self.path.name + f".tmp.{os.getpid()}")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        os.replace(tmp, self.path)


class Context:
    """What a tracker opens with: the dump folder, the tracker run's id and name, the resolved
    config (hyperparameters), the W&B settings, and its own entry of the state (persisted)."""

    def __init__(self, dump_folder, run_id, settings, config, entry):
        self.dump_folder = Path(dump_folder)
        self.run_id = run_id
        self.settings = settings
        self.config = config
        self.entry = entry
        self.new = not entry["last_step"] and not entry.get("opened")

    def run_folder(self):
        """A file-name-safe <run_name, else job.name>-<run id>."""
        name = self.settings.get("run_name") or self.config.get("job", {}).get("name") or "dflash"
        return re.sub(r"[^A-Za-z0-9._-]+", "_", name) + "-" + self.run_id


def open_tracker(name, ctx):
    """The tracker object, or None after one warning when it cannot start."""
    try:
        if name == "tensorboard":
            from dflash_data.track_tensorboard import TensorBoardTracker

            tracker = TensorBoardTracker(ctx)
        else:
            from dflash_data.track_wandb import WandbTracker

            tracker = WandbTracker(ctx)
        ctx.entry["opened"] = True
        return tracker
    except (Exception, SystemExit) as e:
        warn(f"tracker {name} could not start ({type(e).__name__}: {e}); it is dropped, training and "
             f"metrics.jsonl go on (install the pinned packages with `bash scripts/setup-python.sh`)")
        return None


def settings_from(args, config):
    metrics = config.get("metrics", {})
    pick = lambda flag, key: flag if flag is not None else (metrics.get(key) or "")
    trackers = args.trackers.split(",") if args.trackers is not None else list(metrics.get("trackers", []))
    return {
        "trackers": [t.strip() for t in trackers if t.strip()],
        "run_name": pick(args.run_name, "run_name"),
        "wandb_project": pick(args.wandb_project, "wandb_project"),
        "wandb_entity": pick(args.wandb_entity, "wandb_entity"),
        "wandb_mode": pick(args.wandb_mode, "wandb_mode"),
    }


def lock(path, ending):
    """Holds `path` exclusively, waiting while another follower (of the run before a resume)
    finishes; None when asked to stop while waiting."""
    f = open(path, "a")
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if ending.signalled:
                f.close()
                return None
            time.sleep(0.2)


def forward(lines, trackers, state):
    """Feeds each record to each tracker that has not had its (kind, step); a tracker that
    raises is dropped. Returns whether anything was sent."""
    sent = False
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            parsed = classify(json.loads(line))
        except ValueError:
            warn(f"skipped a line of metrics.jsonl that is not JSON: {line[:80]}")
            continue
        if parsed is None:
            continue
        kind, step, scalars = parsed
        for name, tracker in list(trackers.items()):
            last = state.tracker(name)["last_step"]
            if step <= last.get(kind, -1):
                continue
            try:
                if scalars:
                    tracker.log(step, scalars)
            except (Exception, SystemExit) as e:
                drop(name, trackers, f"failed while logging step {step} ({type(e).__name__}: {e})")
                continue
            last[kind] = step
            sent = True
    return sent


def drop(name, trackers, why):
    tracker = trackers.pop(name)
    warn(f"tracker {name} {why}; it is dropped, training, metrics.jsonl and the other trackers go on")
    try:
        tracker.close()
    except (Exception, SystemExit):
        pass


def run(args):
    dump = Path(args.dump_folder).resolve()
    folder = dump / "trackers"
    folder.mkdir(parents=True, exist_ok=True)
    config = {}
    config_path = folder / "config.json"
    if config_path.exists():
        try:
            config = json.loads(config_path.read_text())
        except ValueError as e:
            warn(f"{config_path} is not JSON ({e}); the trackers get no hyperparameters")
    settings = settings_from(args, config)
    unknown = [t for t in settings["trackers"] if t not in TRACKERS]
    if unknown or not settings["trackers"]:
        print(f"dflash-data track: {'unknown tracker ' + ', '.join(unknown) if unknown else 'no trackers'}: "
              f"name them in the config's metrics.trackers or with --trackers (the trackers are "
              f"{', '.join(TRACKERS)})", file=sys.stderr)
        return 2

    ending = Ending(args.parent_pid)
    previous_hook = threading.excepthook
    threading.excepthook = lambda hook: warn(f"{hook.thread.name if hook.thread else 'a thread'} failed "
                                             f"({hook.exc_type.__name__}: {hook.exc_value})")
    try:
        return follow(args, dump, config, settings, ending)
    except Exception as e:
        warn(f"stopped ({type(e).__name__}: {e}); metrics.jsonl has every record, and `dflash-data track "
             f"--dump-folder {dump}` feeds the trackers from it later")
        return 1
    finally:
        threading.excepthook = previous_hook
        ending.restore()


def follow(args, dump, config, settings, ending):
    folder = dump / "trackers"
    held = lock(folder / "lock", ending)
    if held is None:
        return 0
    state = State(folder / "state.json", args.restart_at)
    trackers = {}
    for name in dict.fromkeys(settings["trackers"]):
        tracker = open_tracker(name, Context(dump, state.run_id, settings, config, state.tracker(name)))
        if tracker is not None:
            trackers[name] = tracker
    try:
        state.save()
        reader = LineReader(dump / "metrics.jsonl", line_start(dump / "metrics.jsonl", state.offset))
        finishing = False
        while trackers:
            if ending.ended():
                finishing = True  # one more read takes what the trainer wrote before it ended
            if forward(reader.read(), trackers, state):
                for name, tracker in list(trackers.items()):
                    try:
                        tracker.flush()
                    except (Exception, SystemExit) as e:
                        drop(name, trackers, f"failed to write ({type(e).__name__}: {e})")
                state.save()
            if finishing:
                break
            ending.wait(args.poll)
    finally:
        for name, tracker in list(trackers.items()):
            try:
                tracker.close()
            except (Exception, SystemExit) as e:
                warn(f"tracker {name} failed to finish ({type(e).__name__}: {e}); what it was sent may be "
                     f"incomplete")
        try:
            state.save()  # before the lock goes: the next follower reads it
        finally:
            held.close()
    return 0


def register(sub):
    p = sub.add_parser(
        "track",
        help="feed a run's metrics.jsonl to TensorBoard and Weights & Biases",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--dump-folder", required=True, help="the run's job.dump_folder (holds metrics.jsonl)")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="follow metrics.jsonl until this process (the trainer) ends; without it, forward "
                        "what the file holds and exit")
    p.add_argument("--restart-at", type=int, default=None, metavar="BYTES",
                   help="start new tracker runs with the records from this byte offset of metrics.jsonl on "
                        "(the trainer passes it when checkpoint.resume = false)")
    p.add_argument("--trackers", default=None,
                   help="comma-separated: tensorboard, wandb (default: the config's metrics.trackers)")
    p.add_argument("--run-name", default=None, help="default: the config's metrics.run_name")
    p.add_argument("--wandb-project", default=None, help="default: the config's metrics.wandb_project")
    p.add_argument("--wandb-entity", default=None, help="default: the config's metrics.wandb_entity")
    p.add_argument("--wandb-mode", default=None, choices=["online", "offline"],
                   help="default: the config's metrics.wandb_mode")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between reads of metrics.jsonl")
    p.set_defaults(run=run)
