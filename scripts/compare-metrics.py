#!/usr/bin/env python3
"""Compares a metrics.jsonl with a reference one (scripts/test-kill-resume.sh: an interrupted and
resumed run against an uninterrupted one). Python 3 standard library only.

  compare-metrics.py REFERENCE CANDIDATE     exit 0: the same records; 1: the problems, listed
  compare-metrics.py --self-test REFERENCE  tampered copies of REFERENCE must fail (exit 1 if not)

The candidate passes when every line is a complete JSON object with an integer "step", every
(kind, step) appears exactly once (kinds as record_kind in train/train_log.cpp), the records are
those of the reference in the same order, and every field equals the reference's except the
TIMING fields below.
"""
import json
import os
import shutil
import sys
import tempfile

# Fields that measure the machine, not the training; they differ between two uninterrupted runs.
TIMING = {
    "tokens_per_s",  # train records: tokens over the wall time of the logged steps
    "step_ms",  # train records: mean wall time of the logged steps
    "memory_mib",  # train records: arena + persistent bytes per worker, as measured at startup
}


def record_kind(r):
    """train (no "eval" key), spec ("eval" begins with "spec_tau") or eval."""
    if "eval" not in r:
        return "train"
    e = r["eval"]
    return "spec" if isinstance(e, str) and e.startswith("spec_tau") else "eval"


def load(path):
    """(records, problems): the records in file order as (kind, step, line number, record)."""
    problems = []
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        problems.append(f"{path}: the last line is torn (no newline at the end of the file)")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline ending the last record
    records, seen = [], {}
    for n, raw in enumerate(lines, 1):
        try:
            r = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            problems.append(f"{path}:{n}: not JSON ({e}): {raw[:120]!r}")
            continue
        if not isinstance(r, dict) or not isinstance(r.get("step"), int) or isinstance(r.get("step"), bool):
            problems.append(f"{path}:{n}: not a record with an integer \"step\": {raw[:120]!r}")
            continue
        key = (record_kind(r), r["step"])
        if key in seen:
            problems.append(f"{path}:{n}: duplicate {key[0]} record of step {key[1]} (first at line {seen[key]})")
            continue
        seen[key] = n
        records.append((key[0], key[1], n, r))
    return records, problems


def same(a, b):
    """JSON values equal, with the type (1 and 1.0 and true differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def compare(reference, candidate):
    """The problems of candidate against reference (empty: it passes)."""
    ref, problems = load(reference)
    if problems:
        return [f"the reference is not a valid metrics.jsonl: {p}" for p in problems]
    got, problems = load(candidate)
    ref_keys = {(k, s): (n, r) for k, s, n, r in ref}
    got_keys = {(k, s): (n, r) for k, s, n, r in got}
    for k, s, n, _ in ref:
        if (k, s) not in got_keys:
            problems.append(f"{candidate}: the {k} record of step {s} is missing (reference line {n})")
    for k, s, n, _ in got:
        if (k, s) not in ref_keys:
            problems.append(f"{candidate}:{n}: a {k} record of step {s} that the reference does not have")
    for k, s, n, r in got:
        if (k, s) not in ref_keys:
            continue
        rn, rr = ref_keys[(k, s)]
        for field in sorted(set(rr) | set(r)):
            if field in TIMING:
                continue
            if field not in r:
                problems.append(f"{candidate}:{n}: step {s}, {k} record: field {field!r} is missing "
                                f"(reference: {json.dumps(rr[field])})")
            elif field not in rr:
                problems.append(f"{candidate}:{n}: step {s}, {k} record: field {field!r} is not in the reference")
            elif not same(rr[field], r[field]):
                problems.append(f"{candidate}:{n}: step {s}, {k} record: field {field!r} differs: reference "
                                f"{json.dumps(rr[field])}, this run {json.dumps(r[field])}")
    if not problems:
        order = [(k, s) for k, s, _, _ in got]
        want = [(k, s) for k, s, _, _ in ref]
        if order != want:
            i = next(i for i, (a, b) in enumerate(zip(order, want)) if a != b)
            problems.append(f"{candidate}:{got[i][2]}: the records are in another order than the reference's: "
                            f"{order[i][0]} record of step {order[i][1]} where the reference has the "
                            f"{want[i][0]} record of step {want[i][1]}")
    return problems


def self_test(reference):
    """Tampered copies of reference: each must fail, naming what was planted; untouched and
    timing-only changes must pass. Returns the number of wrong verdicts."""
    with open(reference, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    train = [i for i, l in enumerate(lines) if record_kind(json.loads(l)) == "train"]
    evals = [i for i, l in enumerate(lines) if record_kind(json.loads(l)) != "train"]
    assert len(train) >= 3 and evals, f"{reference}: the self-test needs 3 train records and an eval record"
    mid = train[len(train) // 2]

    def edit(i, **fields):
        r = json.loads(lines[i])
        r.update(fields)
        return json.dumps(r) + "\n"

    mid_record = json.loads(lines[mid])
    cases = [  # name, the tampered lines, a text the verdict must contain ("" = must pass)
        ("untouched", lines, ""),
        ("timing fields changed", [edit(i, step_ms=1.5, tokens_per_s=2.5, memory_mib=3.5) for i in range(len(lines))], ""),
        ("planted duplicate", lines[: mid + 1] + [lines[mid]] + lines[mid + 1 :], "duplicate train record of step"),
        ("duplicate eval", lines + [lines[evals[-1]]], "duplicate"),
        ("missing record", lines[:mid] + lines[mid + 1 :], f"train record of step {mid_record['step']} is missing"),
        ("changed loss", lines[:mid] + [edit(mid, loss=mid_record["loss"] + 1e-12)] + lines[mid + 1 :],
         f"step {mid_record['step']}, train record: field 'loss' differs"),
        ("changed int to float", lines[:mid] + [edit(mid, tokens=float(mid_record["tokens"]))] + lines[mid + 1 :],
         "field 'tokens' differs"),
        ("extra field", lines[:mid] + [edit(mid, extra=1)] + lines[mid + 1 :], "field 'extra' is not in the reference"),
        ("torn last line", lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], "torn"),
        ("garbage line", lines[:mid] + [b"{\"step\": 3, \"loss\"\n"] + lines[mid:], "not JSON"),
        ("swapped records", lines[:mid] + [lines[mid + 1], lines[mid]] + lines[mid + 2 :], "another order"),
    ]
    wrong = 0
    tmp = tempfile.mkdtemp(prefix="compare-metrics-")
    try:
        for name, tampered, want in cases:
            path = os.path.join(tmp, "metrics.jsonl")
            with open(path, "wb") as f:
                f.write(b"".join(l if isinstance(l, bytes) else l.encode() for l in tampered))
            problems = compare(reference, path)
            ok = (not problems) if not want else any(want in p for p in problems)
            if not ok:
                wrong += 1
                print(f"compare-metrics self-test: FAIL {name}: wanted "
                      f"{'a pass' if not want else repr(want)}, got {problems[:3] or 'a pass'}")
    finally:
        shutil.rmtree(tmp)
    if not wrong:
        print(f"compare-metrics self-test: all {len(cases)} tampered copies judged right")
    return wrong


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return 1 if self_test(argv[2]) else 0
    if len(argv) != 3 or argv[1].startswith("--"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    problems = compare(argv[1], argv[2])
    if not problems:
        return 0
    for p in problems[:20]:
        print(f"compare-metrics: {p}")
    if len(problems) > 20:
        print(f"compare-metrics: ... and {len(problems) - 20} more")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
