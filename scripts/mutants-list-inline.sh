# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh): the logic written
# inline in headers (the launcher, CRC-32, SplitMix64, plans, configs, step results, shards; the most included headers are in
# scripts/mutants-list-headers.sh), the cluster and the drafter spec.
# --- The drafter's parameter list and default target layers (model/drafter_spec.cpp) ---
mutant "drafter spec: k_proj sized by the query heads, not the key/value heads" "-ts=drafter" \
  'p.push_back({L + "self_attn.k_proj.weight", {kv, H}});' \
  'p.push_back({L + "self_attn.k_proj.weight", {q, H}});'
mutant "drafter spec: o_proj listed as [q, H], transposed" "-ts=inline-wiring -tc=drafter?parameters*" \
  'p.push_back({L + "self_attn.o_proj.weight", {H, q}});' \
  'p.push_back({L + "self_attn.o_proj.weight", {q, H}});'
mutant "drafter spec: q_norm over the hidden size instead of head_dim" "-ts=drafter" \
  'p.push_back({L + "self_attn.q_norm.weight", {hd}});' \
  'p.push_back({L + "self_attn.q_norm.weight", {H}});'
mutant "default target layers: one feature takes the middle layer rounded up" "-ts=inline-wiring -tc=default?target?layers*" \
  'if (n == 1) return {L / 2};' \
  'if (n == 1) return {(L + 1) / 2};'
mutant "default target layers: halves rounded away from zero, not to even" "-ts=drafter -tc=default?target?layer*" \
  'ids.push_back(int64_t(std::nearbyint(x)));' \
  'ids.push_back(int64_t(std::round(x)));'
mutant "default target layers: a drafter of no features accepted" "-ts=inline-wiring -tc=default?target?layers*" \
  'DF_CHECK(L >= 1 && n >= 1,' \
  'DF_CHECK(L >= 1 && n >= 0,'
# --- The cluster (train/cluster.cpp): the CPU build refuses a launched process ---
mutant "cluster: a CPU build's refusal of a launched process names the launcher, not the rank" "-ts=inline-wiring -tc=a?launched?process*" \
  'DF_FAIL("this process is " << launch.describe() << ", but this build has no NCCL: the processes of a run meet "' \
  'DF_FAIL("this process is " << launch.launcher << ", but this build has no NCCL: the processes of a run meet "'
# --- Rendezvous state (dist/rendezvous_wire.h) ---
mutant "rendezvous: the error line counts as printed from the start, so a failing rank prints none" "-ts=rendezvous?failure" \
  'std::shared_ptr<std::atomic<bool>> printed = std::make_shared<std::atomic<bool>>(false);' \
  'std::shared_ptr<std::atomic<bool>> printed = std::make_shared<std::atomic<bool>>(true);'
# --- splitmix64, the launch, CRC-32 ---
mutant "splitmix64: the final xor-shift by 32, not 31" "-ts=inline-wiring -tc=splitmix64*" \
  'return x ^ (x >> 31);' \
  'return x ^ (x >> 32);'
mutant "launch: a world of one counts as distributed" "-ts=launch" \
  'bool distributed() const { return world > 1; }' \
  'bool distributed() const { return world >= 1; }'
mutant "crc32: the value lacks the final complement" "-ts=checkpoint-io" \
  'uint32_t value() const { return ~state_; }' \
  'uint32_t value() const { return state_; }'
# --- Plans, the engine, configs, step results, data ---
mutant "plan: the arena needed ignores the offline placement" "-ts=replay,checkpoint" \
  'size_t needed_bytes() const { return placement ? placement->arena_bytes : arena_bytes; }' \
  'size_t needed_bytes() const { return arena_bytes; }'
mutant "engine: partial recomputation offered to bodies of 13 segments" "-ts=inline-wiring -tc=the?recompute?ladder*" \
  'constexpr int64_t kMaxPartialSegments = 12;' \
  'constexpr int64_t kMaxPartialSegments = 13;'
mutant "config: runtime.heartbeat_timeout_s defaults to 3 s" "-ts=inline-wiring -tc=absent?keys*" \
  'double heartbeat_timeout_s = 30;      // a rank silent this long counts as hung' \
  'double heartbeat_timeout_s = 3;      // a rank silent this long counts as hung'
mutant "config: training.beta1 defaults to 0.99" "-ts=inline-wiring -tc=absent?keys*" \
  'double beta1 = 0.9, beta2 = 0.95' \
  'double beta1 = 0.99, beta2 = 0.95'
mutant "step result: tau is NaN for a micro-batch without blocks" "-ts=inline-wiring -tc=a?step?result*" \
  'double tau() const { return sums[5] > 0 ? sums[4] / sums[5] : 0.0; }' \
  'double tau() const { return sums[5] >= 0 ? sums[4] / sums[5] : 0.0; }'
mutant "micro-batch: the anchor seed takes the index before the epoch" "-ts=inline-wiring -tc=splitmix64*" \
  'uint64_t anchor_seed(uint64_t base) const { return derive_seed(base, uint64_t(epoch), uint64_t(index)); }' \
  'uint64_t anchor_seed(uint64_t base) const { return derive_seed(base, uint64_t(index), uint64_t(epoch)); }'
mutant "token shards: written and expected as version 2" "-ts=data,bad-input-files" \
  'constexpr uint32_t kTokenShardVersion = 1;' \
  'constexpr uint32_t kTokenShardVersion = 2;'
