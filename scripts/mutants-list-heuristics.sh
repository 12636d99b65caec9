# The mutants of kernels/heuristics.h's rules (sourced by scripts/mutants-list-files.sh; see mutant()
# in scripts/mutants.sh): each moves one rule, which tests/test_heuristics.cpp must notice on the CPU.
mutant "heuristics: dk/dv split only below twice the SMs, not one and a half" "-ts=heuristics" \
  'c.dkdv = f.dkdv ? *f.dkdv : (2 * ctx_ctas < 3 * sms ? Dkdv::split : Dkdv::ws);' \
  'c.dkdv = f.dkdv ? *f.dkdv : (2 * ctx_ctas < 2 * sms ? Dkdv::split : Dkdv::ws);'
mutant "heuristics: dq fused while the draft CTAs' phase is up to 30 % of the context work" "-ts=heuristics" \
  'const bool fused = draft_phase <= 0.08 * std::max(range0, ctx_chunks / double(sms));' \
  'const bool fused = draft_phase <= 0.3 * std::max(range0, ctx_chunks / double(sms));'
mutant "heuristics: dk/dv chunks by TMA where a chunk holds several blocks" "-ts=heuristics" \
  'c.tma_chunks = c.dkdv == Dkdv::ws && !f.no_tma && s.rows_per_kv() == 64 &&' \
  'c.tma_chunks = c.dkdv == Dkdv::ws && !f.no_tma && s.rows_per_kv() >= 64 &&'
mutant "heuristics: CE rows by thread-block clusters on compute capability 8" "-ts=heuristics" \
  'if (d.major < 9) return {0, "thread-block clusters need compute capability 9.0"};' \
  'if (d.major < 8) return {0, "thread-block clusters need compute capability 9.0"};'
mutant "heuristics: the target's attention on cuDNN for auto in a build without it" "-ts=heuristics" \
  'return cudnn_built;' \
  'return true;'
