#!/usr/bin/env bash
# On the GPU host: runs dflash-bench commands while nvidia-smi samples the SM clock, power and
# clock-event reasons every 100 ms, then prints each command's step time beside its mean clock
# and power (is a step slower because the GPU clocked down?).
#   bash scripts/gpu-clocks.sh OUT_DIR "ARGS OF dflash-bench" ["ARGS" ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1; shift
mkdir -p "$out"
fields=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
TZ=UTC nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -lms 100 >"$out/clocks.csv" 2>&1 &
smi=$!
: >"$out/marks.txt"
rc=0
for args in "$@"; do
  echo "start $(date +%s.%N) $args" >>"$out/marks.txt"
  # shellcheck disable=SC2086
  ./build/dflash-bench $args 2>&1 | tee -a "$out/runs.log" | grep -E '^ *[0-9]+(:[0-9]+)? '
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1  # the bench's own status (the target's lines have no ':')
  echo "end $(date +%s.%N)" >>"$out/marks.txt"
  sleep 2  # a gap between the runs' samples
done
kill $smi 2>/dev/null
python3 - "$out" <<'PY'
import sys, datetime
out = sys.argv[1]
samples = []
for line in open(out + "/clocks.csv"):
    f = [x.strip() for x in line.split(",")]
    if len(f) < 5: continue
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
        samples.append((t, float(f[1]), float(f[2]), float(f[3]), f[4]))
    except ValueError:
        pass
runs, cur = [], None
for line in open(out + "/marks.txt"):
    w = line.split(maxsplit=2)
    if w[0] == "start": cur = [float(w[1]), None, w[2].strip() if len(w) > 2 else ""]
    else: cur[1] = float(w[1]); runs.append(cur)
print("%-70s %8s %9s %9s %7s  %s" % ("dflash-bench", "samples", "SM MHz", "power W", "temp C", "reasons (most frequent)"))
for t0, t1, args in runs:
    s = [x for x in samples if t0 <= x[0] <= t1 and x[2] > 450]  # samples under load (not the weights' random fill)
    if not s: print("%-70s %8d" % (args[:70], 0)); continue
    n = len(s); reasons = {}
    for x in s: reasons[x[4]] = reasons.get(x[4], 0) + 1
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
    print("%-70s %8d %9.0f %9.0f %7.0f  %s" % (args[:70], n, sum(x[1] for x in s) / n, sum(x[2] for x in s) / n,
          sum(x[3] for x in s) / n, " ".join("%s:%d" % kv for kv in top)))
PY
exit $rc
