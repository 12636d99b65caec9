#!/usr/bin/env python3
# Reads an Nsight Compute report of one kernel (ncu -c 1 ... -o REPORT) and prints its sampled
# warp stall reasons and the SASS instructions with the most stall samples: where its time goes.
#   python3 scripts/ncu-hotspots.py REPORT.ncu-rep [TOP]
import csv, io, subprocess, sys

rep = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 40


def ncu(*args):
    return subprocess.run(["ncu", "--import", rep, *args], capture_output=True, text=True).stdout


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


raw = list(csv.reader(io.StringIO(ncu("--page", "raw", "--csv"))))
if len(raw) >= 3:
    head, r = raw[0], raw[2]
    name = r[head.index("Kernel Name")] if "Kernel Name" in head else "?"
    cols = [i for i, h in enumerate(head) if "pcsamp_warps_issue_stalled" in h and not h.endswith("not_issued")]
    pairs = sorted(((number(r[i]), head[i].split("stalled_")[-1]) for i in cols), reverse=True)
    total = sum(v for v, _ in pairs) or 1.0
    print(f"== {name[:70]}: stall samples by reason ({total:.0f})")
    for v, n in pairs[:14]:
        print(f"   {n:40s} {v:12.0f} {100 * v / total:5.1f}%")

table = list(csv.reader(io.StringIO(ncu("--page", "source", "--csv", "--print-source", "sass"))))
head = next((t for t in table if "Source" in t), None)
if head is None:
    print("no source page:", table[:2])
    sys.exit(0)
key = next((i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All")), None)
src = head.index("Source")
body = [t for t in table if len(t) == len(head) and t is not head]
total = sum(number(t[key]) for t in body) or 1.0
print(f"== top {top} SASS instructions by stall samples ({total:.0f} samples; columns: {head[:6]})")
for t in sorted(body, key=lambda t: -number(t[key]))[:top]:
    print(f"   {100 * number(t[key]) / total:5.1f}%  {t[0]:>8s}  {t[src][:100]}")
