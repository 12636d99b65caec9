#!/usr/bin/env python3
"""The figure lines of scripts/gpu-bench.sh: each of our benchmark results beside its anchor's.

  bench-figures.py wrap STEP SIDE LABEL COMMAND < OUTPUT >> RAW
      keeps the JSON objects that a command printed (one a line), each as a raw record
      {"step", "side": "ours" or "anchor", "label", "command", "result"}
  bench-figures.py has RAW SIDE LABEL [KEY=VALUE ...]
      exit status 0 when RAW holds an error-free result of that side and label with those fields
  bench-figures.py figures STEP RAW --gpu NAME --driver VERSION --date DAY --commit SHA --out FILE
      appends to FILE one JSON line per figure of STEP (below) and prints them as a table; exit status
      1 when the step gave no figure

A figure line: figure (what was measured), metric, value, unit, anchor (what it stands beside),
anchor_value (null where there is no anchor), ratio (value / anchor_value), gpu, driver, date, commit,
command, anchor_command, step, details (the shape and the result's other fields).
"""
import argparse
import json
import sys

MS = "ms"
DRAFTER_ANCHORS = {"compiled": "the PyTorch step under torch.compile (flex_attention inside), same run",
                   "flex": "the PyTorch step with flex_attention compiled alone, the rest eager, same run",
                   "sdpa": "the PyTorch step over a dense mask (SDPA), same run"}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wrap(step, side, label, command):
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            result = json.loads(line)
        except ValueError:
            continue
        print(json.dumps({"step": step, "side": side, "label": label, "command": command, "result": result}))


def matches(record, side, label, want):
    r = record["result"]
    return (record["side"] == side and record["label"] == label and "error" not in r
            and all(str(r.get(k)) == v for k, v in want.items()))


def find(records, side, label, **want):
    want = {k: str(v) for k, v in want.items()}
    return next((x for x in records if matches(x, side, label, want)), None)


def figure(name, metric, value, unit, ours, anchor_name, anchor=None, anchor_value=None, **details):
    """One figure line's own fields (the run's fields are added by the caller)."""
    ratio = round(value / anchor_value, 4) if anchor_value else None
    line = {"figure": name, "metric": metric, "value": value, "unit": unit, "anchor": anchor_name,
            "anchor_value": anchor_value, "ratio": ratio, "command": ours["command"],
            "anchor_command": anchor["command"] if anchor else None}
    if anchor and "error" in anchor["result"]:
        line["anchor_error"] = anchor["result"]["error"]
    line["details"] = details
    return line


def drafter_figures(step, records):
    """Our drafter step at each bucket beside the anchor step of that bucket (the step's anchor label);
    for the three qwen3-8b buckets recorded together, also the startup beside the anchor's warm-ups."""
    ours = [x for x in records if x["step"] == step and x["side"] == "ours" and x["result"].get("bench") == "step"]
    anchors = [x for x in records if x["step"] == step and x["side"] == "anchor"]
    out = []
    for x in ours:
        r = x["result"]
        a = next((y for y in anchors if y["result"].get("seq") == r["seq"] and y["result"].get("anchors") == r["anchors"]),
                 None)
        what = DRAFTER_ANCHORS.get(a["label"], a["label"]) if a else "none measured"
        av = a["result"].get("step_ms") if a else None
        out.append(figure(f"drafter step, {r['model']} {r['seq']}:{r['anchors']}, checkpointing "
                          f"{'on' if r['checkpointing'] else 'off'} ({x['label']})", "drafter_step_ms", r["step_ms"], MS,
                          x, what, a, av, model=r["model"], seq=r["seq"],
                          anchors=r["anchors"], batch=r["batch"], recomputed=r["recomputed"],
                          partially_recomputed=r["partially_recomputed"], peak_gib=r["peak_gib"], tflops=r["tflops"],
                          arena_bytes=r["arena_bytes"], anchor_peak_gib=a["result"].get("peak_gib") if a else None))
    together = [x for x in ours if x["label"] == "three-buckets"]
    if together:
        buckets = [(x["result"]["seq"], x["result"]["anchors"]) for x in together]
        warm = [next((y for y in anchors if (y["result"].get("seq"), y["result"].get("anchors")) == b), None)
                for b in buckets]
        total = None
        if all(w is not None and "warmup_s" in w["result"] for w in warm):
            total = round(sum(w["result"]["warmup_s"] for w in warm), 1)
        r = together[0]["result"]
        out.append(figure(f"startup, planning and recording {len(buckets)} {r['model']} buckets", "startup_s",
                          round(r["startup_ms"] / 1000, 3), "s", together[0],
                          "PyTorch warm-up (three steps, compilation included) of the same buckets, same run",
                          warm[0] if warm else None, total, buckets=[f"{s}:{n}" for s, n in buckets]))
    return out


def target_figures(step, records):
    out = []
    for x in records:
        r = x["result"]
        if x["step"] != step or x["side"] != "ours" or r.get("bench") != "target" or r.get("layers") != 36:
            continue
        a = find(records, "anchor", "hf-forward", seq=r["seq"])
        out.append(figure(f"target forward, Qwen3-8B dims, all 36 layers, {r['seq']} tokens", "target_forward_ms",
                          r["fwd_ms"], MS, x, "HF transformers' forward (sdpa), same run", a,
                          a["result"]["fwd_ms"] if a else None, seq=r["seq"], tflops=r["tflops"],
                          anchor_peak_gib=a["result"].get("peak_gib") if a else None))
    return out


def online_figures(step, records):
    """The online step (target + drafter) beside HF's target forward plus the compiled drafter step, at 4096."""
    out = []
    for x in records:
        r = x["result"]
        if x["step"] != step or x["side"] != "ours" or r.get("bench") != "step-online":
            continue
        t = find(records, "anchor", "hf-forward", seq=r["seq"])
        d = find(records, "anchor", "compiled", seq=r["seq"], anchors=r["anchors"], hidden=4096)
        total = round(t["result"]["fwd_ms"] + d["result"]["step_ms"], 2) if t and d else None
        line = figure(f"online step (target forward + drafter step), {r['model']} {r['seq']}:{r['anchors']} "
                      f"({x['label']})", "online_step_ms", r["step_ms"], MS, x,
                      "HF transformers' target forward + the torch.compile drafter step, same run", d, total,
                      seq=r["seq"], anchors=r["anchors"], peak_gib=r["peak_gib"], recomputed=r["recomputed"],
                      anchor_parts={"target_forward_ms": t["result"]["fwd_ms"] if t else None,
                                    "drafter_step_ms": d["result"]["step_ms"] if d else None})
        line["anchor_command"] = " && ".join(y["command"] for y in (t, d) if y) or None
        out.append(line)
    return out


def decode_figures(step, records):
    out = []
    for x in records:
        r = x["result"]
        if x["step"] != step or x["side"] != "ours" or r.get("bench") != "spec":
            continue
        for c in r["contexts"]:
            compiled = find(records, "anchor", "hf-decode-compiled", context=c["context"])
            eager = find(records, "anchor", "hf-decode-eager", context=c["context"])
            out.append(figure(f"decode step, the target alone at Qwen3-8B dims, context {c['context']}",
                              "decode_step_ms", round(c["step_ms"], 3), MS, x,
                              "HF transformers' decode step under torch.compile, same run", compiled,
                              compiled["result"]["step_ms"] if compiled else None, context=c["context"],
                              anchor_eager_ms=eager["result"]["step_ms"] if eager else None))
            out.append(figure(f"speculative round (drafter block of {r['block_size']} + verify), context "
                              f"{c['context']}", "spec_round_ms", round(c["round_ms"], 3), MS, x,
                              "none (no PyTorch round measured)", context=c["context"],
                              drafter_ms=round(c["drafter_ms"], 3)))
    return out


def generate_figures(step, records):
    """Batched decoding's tokens per second at each batch beside HF's generate: eager in the generate
    step, with each decode step against its bandwidth floor on this run's GPU; compiled in the
    generate-compiled step (its warm-up takes minutes, so it has a step of its own)."""
    out = []
    modes = {"generate": [("eager", "HF transformers' generate, eager with its static cache, same run")],
             "generate-compiled": [("compiled", "HF transformers' generate, compiled (its static cache), same run")]}
    for x in records:
        r = x["result"]
        if x["step"] != step or x["side"] != "ours" or r.get("bench") != "generate":
            continue
        for c in r["steps"]:
            b = c["batch"]
            for mode, what in modes[step]:
                a = next((y for y in records if y["side"] == "anchor" and y["step"] == step
                          and y["label"] == f"hf-generate-{mode}" and y["result"].get("batch") == b),
                         None)  # with its error, if it failed
                out.append(figure(f"generate, Qwen3-8B dims, batch {b}, prompt {c['context']}, {c['new_tokens']} new "
                                  f"tokens, against HF {mode}", "generate_tokens_per_s", c["tokens_per_s"],
                                  "tokens/s", x, what, a, a["result"].get("tokens_per_s") if a else None, batch=b,
                                  context=c["context"], step_ms=c["step_ms"],
                                  anchor_step_ms=a["result"].get("step_ms") if a else None,
                                  anchor_warmup_s=a["result"].get("warmup_s") if a else None))
            if step != "generate":
                continue
            floor = c["floor_ms_h200"] if "H200" in (GPU or "") else c["floor_ms_h100"]
            out.append(figure(f"generate decode step against its bandwidth floor, batch {b}, context "
                              f"{c['context']}-{c['context'] + c['new_tokens']}", "pct_of_floor",
                              round(100 * floor / c["step_ms"], 1), "%", x,
                              "none (the weights and the keys and values read once, at the GPU's nominal bandwidth)",
                              step_ms=c["step_ms"], floor_ms=floor))
    return out


def multi_figures(step, records):
    out = []
    for x in records:
        r = x["result"]
        if x["step"] != step or x["side"] != "ours" or r.get("bench") != "multi" or r["gpus"] < 2:
            continue
        out.append(figure(f"throughput on {r['gpus']} GPUs against one, {r['model']} {r['seq']}:{r['anchors']}"
                          f"{', overlapped reduction' if r['overlap'] else ''}{', sharded' if r['shard'] else ''}",
                          "throughput_vs_1gpu", round(r["throughput_vs_1gpu"], 3), "x", x,
                          "one GPU in the same command", gpus=r["gpus"], step_ms=r["step_ms"],
                          tokens_per_s=r["tokens_per_s"], persistent_bytes_per_gpu=r["persistent_bytes_per_gpu"]))
    return out


BUILDERS = {"drafter": drafter_figures, "drafter-small": drafter_figures, "drafter-long": drafter_figures,
            "target": target_figures, "online": online_figures, "decode": decode_figures,
            "generate": generate_figures, "generate-compiled": generate_figures, "multi-gpu": multi_figures}
GPU = None  # the run's GPU name (figures' --gpu), for the bandwidth floor of its kind


def figures(a):
    global GPU
    GPU = a.gpu
    records = load(a.raw)
    lines = BUILDERS[a.step](a.step, records)
    first = ("figure", "metric", "value", "unit", "anchor", "anchor_value", "ratio")
    run = {"gpu": a.gpu, "driver": a.driver, "date": a.date, "commit": a.commit, "step": a.step}
    with open(a.out, "a") as f:
        for line in lines:
            line = {**{k: line[k] for k in first}, **run, **{k: v for k, v in line.items() if k not in first}}
            f.write(json.dumps(line) + "\n")
            anchor = "-" if line["anchor_value"] is None else f"{line['anchor_value']:g}"
            ratio = "" if line["ratio"] is None else f"  (ratio {line['ratio']:.3f})"
            print(f"FIGURE {line['figure']}: {line['value']:g} {line['unit']}, anchor {anchor}{ratio}")
    if not lines:
        print(f"bench-figures: step {a.step} gave no figure (see its log)")
    return 0 if lines else 1


def main(argv):
    if len(argv) > 1 and argv[1] == "wrap" and len(argv) == 6:
        wrap(*argv[2:])
        return 0
    if len(argv) > 1 and argv[1] == "has" and len(argv) >= 5:
        want = dict(kv.split("=", 1) for kv in argv[5:])
        return 0 if any(matches(x, argv[3], argv[4], want) for x in load(argv[2])) else 1
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("command", choices=["figures"])
    p.add_argument("step", choices=sorted(BUILDERS))
    p.add_argument("raw")
    for k in ("gpu", "driver", "date", "commit", "out"):
        p.add_argument("--" + k, required=True)
    return figures(p.parse_args(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
