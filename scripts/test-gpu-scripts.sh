#!/usr/bin/env bash
# Checks the control flow of scripts/gpu-test.sh and scripts/gpu-bench.sh on the CPU, with stand-ins for
# nvidia-smi, compute-sanitizer, cmake, the test binary, dflash-bench and the PyTorch anchors: every step
# and part runs and passes; a part whose filters match no test case fails; unknown steps and parts are
# refused; the build is for the GPU's own compute capability (9.0: 90a); coverage merges the parts' kernel
# lists; gpu-bench writes one figure line a figure, each with
# its anchor's value and the run's fields, and an anchor's failure leaves its figures without one.
# Part of scripts/test.sh; a few seconds.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "test-gpu-scripts: $*"; failures=$((failures + 1)); }
mkdir -p "$tmp/bin" "$tmp/tree/build" "$tmp/tree/scripts/anchors"
cp -r "$here/scripts/gpu-test.sh" "$here/scripts/gpu-bench.sh" "$here/scripts/bench-figures.py" \
  "$here/scripts/racecheck-foreign.sh" "$here/scripts/sanitizer-coverage.py" "$here/scripts/sanitizer-inventory" \
  "$here/scripts/cuda-archs.sh" \
  "$tmp/tree/scripts/"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1"; chmod +x "$1"; }
stub "$tmp/bin/cmake" 'echo "cmake $*" >>"$OUT/cmake-calls"'
stub "$tmp/bin/nvidia-smi" 'case "$*" in -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)";; *driver_version*) echo 580.1;;
*compute_cap*) echo 9.0;; *) echo "NVIDIA H100 80GB HBM3";; esac'
stub "$tmp/bin/compute-sanitizer" 'while [ $# -gt 0 ]; do case $1 in --*=*) shift;; --*) shift 2;; *) break;; esac; done
"$@"; rc=$?; echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"; exit $rc'
# the test binary: two cases (none where FAKE_NONE matches its arguments); with DFLASH_KERNEL_INVENTORY, two kernels
stub "$tmp/tree/build/dflash-tests" 'k="void dflash::kernels::cuda::fill_kernel<float>(float*, long)"
[ -n "${DFLASH_KERNEL_INVENTORY:-}" ] && { mkdir -p "${DFLASH_KERNEL_INVENTORY%/*}"; printf "%s\nnvjet_x\n" "$k" >"$DFLASH_KERNEL_INVENTORY.$$"; }
n=2; [ -n "${FAKE_NONE:-}" ] && [[ "$*" == *$FAKE_NONE* ]] && n=0
echo "[doctest] test cases: $n | $n passed | 0 failed | 0 skipped"; echo "[doctest] Status: SUCCESS!"'
stub "$tmp/tree/build/dflash-bench" 'python3 - "$@" <<"EOF"
import json, sys
a = sys.argv[1:]
vals = lambda k: [x.split("=", 1)[1] for x in a if x.startswith("--" + k + "=")]
if a[0] == "step":
    for b in vals("bucket"):
        s, n = map(int, b.split(":"))
        print(json.dumps({"bench": "step-online" if "--online" in a else "step", "model": vals("model")[0], "seq": s,
                          "anchors": n, "batch": 1, "checkpointing": True, "recomputed": 5, "partially_recomputed": 0,
                          "step_ms": s / 32, "tflops": 1.0, "startup_ms": 150.0, "arena_bytes": 1, "peak_gib": 2.0}))
elif a[0] == "target":
    for s in map(int, vals("seq")):
        print(json.dumps({"bench": "target", "seq": s, "layers": 36, "fwd_ms": s / 40, "tflops": 1.0}))
elif a[0] == "spec":
    print(json.dumps({"bench": "spec", "model": "qwen3-8b", "block_size": 16, "floor_ms": 3.0, "contexts":
                      [{"context": int(c), "round_ms": 10.0, "drafter_ms": 2.0, "step_ms": 7.0} for c in vals("context")]}))
elif a[0] == "generate":
    n = int(vals("steps")[0]) + 1
    print(json.dumps({"bench": "generate", "model": "qwen3-8b", "steps": [
        {"batch": int(b), "context": 512, "new_tokens": n, "step_ms": 10.0, "tokens_per_s": 100.0 * int(b),
         "floor_ms_h100": 6.0, "floor_ms_h200": 4.0} for b in vals("batch")]}))
EOF'
cat >"$tmp/tree/scripts/anchors/ref_drafter.py" <<'EOF'
import json, sys
a = sys.argv
for b in a[a.index("--buckets") + 1].split(","):
    s, n = map(int, b.split(":"))
    r = {"mode": a[a.index("--modes") + 1], "seq": s, "anchors": n, "hidden": 4096, "warmup_s": 30.0, "step_ms": s / 25}
    print(json.dumps(r if s < 65536 else {"seq": s, "anchors": n, "error": "OutOfMemoryError"}))
EOF
echo 'import json, sys; [print(json.dumps({"seq": int(s), "fwd_ms": int(s) / 30})) for s in sys.argv[1].split(",")]' \
  >"$tmp/tree/scripts/anchors/ref_target.py"
echo 'import json, sys; [print(json.dumps({"context": int(c), "compiled": "--compile" in sys.argv, "step_ms": 8.0})) for c in sys.argv[1].split(",")]' \
  >"$tmp/tree/scripts/anchors/ref_decode.py"
echo 'import json, sys; [print(json.dumps({"batch": int(b), "tokens_per_s": 50.0 * int(b), "step_ms": 20.0} if "--compile" not in sys.argv else {"batch": int(b), "error": "RuntimeError: no warm-up"})) for b in sys.argv[1].split(",")]' \
  >"$tmp/tree/scripts/anchors/ref_generate.py"

run() {  # run NAME WANT_RC SCRIPT ARGS...: one run of a script in the stand-in tree, its output in $tmp/NAME.out
  local name=$1 want=$2; shift 2
  (cd "$tmp/tree" && PATH=$tmp/bin:$PATH OUT=$tmp/out-$name bash "$@") >"$tmp/$name.out" 2>&1
  local rc=$?
  [ "$rc" = "$want" ] || { fail "$name: exit status $rc, wanted $want"; tail -n 15 "$tmp/$name.out"; }
}
echo 'import sys; assert "--dflash-train" in sys.argv; print("{\"check\": \"hf-generate-gpu\", \"failures\": 0}")' \
  >"$tmp/tree/scripts/anchors/hf_generate_gpu_check.py"
run all 0 scripts/gpu-test.sh build suites generate-hf memcheck racecheck initcheck synccheck inventory coverage multi-gpu
grep -q 'every kernel function runs under every tool' "$tmp/all.out" || fail "all: coverage did not pass"
grep -q 'multi-gpu: skipped, one GPU' "$tmp/out-all/multi-gpu.log" || fail "all: multi-gpu not skipped on one GPU"
grep -q -- '-DDFLASH_CUDA_ARCHS=90a$' "$tmp/out-all/cmake-calls" || fail "all: build not configured for the GPU's 90a"
[ "$(grep -c '^== racecheck:' "$tmp/out-all/racecheck.log")" = 9 ] || fail "all: racecheck did not run its 9 parts"
FAKE_NONE=gpu-spec run no-case 1 scripts/gpu-test.sh memcheck:spec
grep -q 'no test case ran' "$tmp/no-case.out" || fail "no-case: a part that ran no case passed"
run unknown-step 2 scripts/gpu-test.sh suites nosuch
run unknown-part 2 scripts/gpu-test.sh memcheck:sampling
run bench 0 scripts/gpu-bench.sh drafter drafter-long target online decode generate generate-compiled multi-gpu
python3 - "$tmp/out-bench/figures.jsonl" >"$tmp/figures.out" 2>&1 <<'EOF' || { fail "bench: figure lines"; cat "$tmp/figures.out"; }
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
keys = {"figure", "metric", "value", "unit", "anchor", "anchor_value", "ratio", "gpu", "date", "commit", "command"}
assert all(keys <= set(x) for x in lines), "a figure line lacks a field"
assert len(lines) == 27, f"{len(lines)} figure lines, wanted 27"
by = {x["figure"]: x for x in lines}
assert by["drafter step, qwen3-8b 4096:512, checkpointing on (arena-2.49)"]["anchor_value"] == 4096 / 25
assert by["startup, planning and recording 3 qwen3-8b buckets"]["anchor_value"] == 90.0
assert by["drafter step, qwen3-8b 65536:512, checkpointing on (long)"]["anchor_error"] == "OutOfMemoryError"
assert by["online step (target forward + drafter step), qwen3-8b 4096:512 (arena-7)"]["anchor_value"] == round(4096 / 30 + 4096 / 25, 2)
assert all(x["gpu"] == "NVIDIA H100 80GB HBM3" for x in lines)
g = by["generate, Qwen3-8B dims, batch 32, prompt 512, 512 new tokens, against HF eager"]
assert (g["value"], g["anchor_value"], g["ratio"]) == (3200.0, 1600.0, 2.0), g
g = by["generate, Qwen3-8B dims, batch 128, prompt 512, 512 new tokens, against HF compiled"]
assert g["anchor_value"] is None and g["anchor_error"].startswith("RuntimeError"), g
assert by["generate decode step against its bandwidth floor, batch 1, context 512-1024"]["value"] == 60.0
EOF
grep -q '^== anchor' "$tmp/out-bench/online.log" && fail "bench: online measured anchors this run already had"
[ "$failures" -eq 0 ] && echo "test-gpu-scripts: gpu-test.sh and gpu-bench.sh judged right on stand-ins" || exit 1
