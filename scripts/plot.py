#!/usr/bin/env python3
# Training curves of a dflash-train run: loss, accuracy and tau (the estimate, and spec_tau when the
# records hold it) against the optimizer step, train and eval, from RUN_DIR/metrics.jsonl into
# RUN_DIR/curves.png, drawn with matplotlib (Debian's python3-matplotlib; scripts/setup.sh installs it).
#
#   python3 scripts/plot.py RUN_DIR [--out FILE] [--json]
#   python3 scripts/plot.py --config FILE [--job.dump_folder=DIR] [other dflash-train arguments]
#
# The second form finds RUN_DIR as dflash-train does (job.dump_folder of the config, overridden on the
# command line), so scripts/train.sh can pass its arguments through. --json prints what was drawn.
import json
import os
import sys

USAGE = "usage: plot.py RUN_DIR [--out FILE] [--json]  |  plot.py --config FILE [--job.dump_folder=DIR ...]"


def fail(message, code=1):
    print("plot.py: " + message, file=sys.stderr)
    sys.exit(code)


def parse_args(argv):
    run_dir, out, config, dump_override, as_json = None, None, None, None, False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(USAGE)
            sys.exit(0)
        elif a == "--json":
            as_json = True
        elif a in ("--out", "--config"):
            if i + 1 >= len(argv):
                fail(a + " needs a value\n" + USAGE, 2)
            i += 1
            if a == "--out":
                out = argv[i]
            else:
                config = argv[i]
        elif a.startswith("--out="):
            out = a[len("--out="):]
        elif a.startswith("--config="):
            config = a[len("--config="):]
        elif a.startswith("--job.dump_folder="):
            dump_override = a[len("--job.dump_folder="):].strip().strip('"').strip("'")
        elif a.startswith("--"):
            pass  # other dflash-train overrides do not move the run folder
        elif run_dir is None:
            run_dir = a
        else:
            fail("unexpected argument '" + a + "'\n" + USAGE, 2)
        i += 1
    if run_dir is None and dump_override is not None:
        run_dir = dump_override
    if run_dir is None and config is not None:
        import tomllib
        try:
            with open(config, "rb") as f:
                cfg = tomllib.load(f)
        except OSError as e:
            fail("cannot read the config " + config + " (" + e.strerror + "); fix: pass the file given to dflash-train")
        except tomllib.TOMLDecodeError as e:
            fail(config + " is not valid TOML (" + str(e) + ")")
        run_dir = cfg.get("job", {}).get("dump_folder", "runs/dflash")  # dflash-train's default
    if run_dir is None:
        fail("no run folder given\n" + USAGE, 2)
    return run_dir, out or os.path.join(run_dir, "curves.png"), as_json


def eval_step(record, last_train_step):
    """The step of an eval record: its "step", else what its "eval" label says (older runs)."""
    if isinstance(record.get("step"), (int, float)):
        return record["step"]
    label = str(record.get("eval", ""))
    if label.startswith("eval at step "):
        try:
            return int(label.split()[-1])
        except ValueError:
            pass
    if "before" in label:
        return 0
    return last_train_step


def read_metrics(path):
    """Train and eval records, in file order, as lists of (step, record)."""
    if not os.path.isfile(path):
        fail(path + " not found; fix: pass the run's folder (job.dump_folder), which holds metrics.jsonl once "
             "training has logged a step")
    train, evals = [], []
    last_train_step = 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                fail("%s:%d: not a JSON object (%s); fix: the file is damaged; remove that line" % (path, number, e))
            if not isinstance(record, dict):
                fail("%s:%d: not a JSON object; fix: the file is damaged; remove that line" % (path, number))
            if "eval" in record:
                evals.append((eval_step(record, last_train_step), record))
            elif isinstance(record.get("step"), (int, float)):
                last_train_step = record["step"]
                train.append((record["step"], record))
    if not train and not evals:
        fail(path + " holds no step or eval records; fix: let the run log at least one step (metrics.log_every)")
    return train, evals


def series(records, key):
    """(steps, values) of the records holding `key`, sorted by step; for a step logged twice (a
    resumed run appends to metrics.jsonl and may repeat steps) the later record wins."""
    by_step = {}
    for step, record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            by_step[step] = value
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def main():
    run_dir, out, as_json = parse_args(sys.argv[1:])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        # Debian's python3-matplotlib belongs to /usr/bin/python3; another python3 first on PATH
        # (pyenv, a venv) does not see it, so try that interpreter once before giving up.
        system = "/usr/bin/python3"
        if (os.environ.get("DFLASH_PLOT_REEXEC") is None and os.access(system, os.X_OK)
                and os.path.realpath(sys.executable) != os.path.realpath(system)):
            os.environ["DFLASH_PLOT_REEXEC"] = sys.executable
            os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])
        tried = sys.executable + (" and " + system if os.environ.get("DFLASH_PLOT_REEXEC") else "")
        fail("matplotlib is not installed for " + tried + " (" + str(e) + "); fix: bash scripts/setup.sh, which "
             "installs Debian's python3-matplotlib (or: apt-get install python3-matplotlib)", 2)

    train, evals = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    panels = [("loss", "loss", ["loss"]), ("accuracy", "accuracy", ["accuracy"]),
              ("tau", "acceptance length tau", ["tau", "spec_tau"])]
    drawn = {}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), dpi=100)
    for ax, (name, title, keys) in zip(axes, panels):
        for key in keys:
            label = "tau estimate" if key == "tau" else "spec_tau (speculative decoding)" if key == "spec_tau" else key
            for part, records, style in (("train", train, dict(linewidth=1.2)),
                                         ("eval", evals, dict(marker="o", linestyle="--", markersize=4))):
                x, y = series(records, key)
                if not x:
                    continue
                ax.plot(x, y, label=part + " " + label, **style)
                drawn[part + "." + key] = {"points": len(x), "first_step": x[0], "last_step": x[-1],
                                           "last": y[-1]}
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(os.path.basename(os.path.normpath(run_dir)) + ": metrics.jsonl")
    fig.tight_layout()
    # Written beside the target and renamed into place, so curves.png is never half-written.
    tmp = out + ".tmp-%d.png" % os.getpid()
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        fail("cannot write " + out + " (" + e.strerror + "); fix: check that the folder is writable")
    plt.close(fig)
    if as_json:
        print(json.dumps({"png": out, "series": drawn}, sort_keys=True))
    else:
        parts = ", ".join("%s %d point%s" % (k, v["points"], "" if v["points"] == 1 else "s")
                          for k, v in sorted(drawn.items()))
        print("curves: " + out + " (" + parts + ")")


if __name__ == "__main__":
    main()
