# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh): speculative
# decoding as the reference package counts it (rounds, shortened last blocks, tokens produced), the
# per-prompt records of `spec --output`, the export the serving engines read, and the trackers' launch.
mutant "spec decoder: a round runs at start = n + max_new - 1, past the reference's last" "-ts=spec -tc=the?golden?case*" \
  'while (start + 1 < end && !stopped) {' \
  'while (start < end && !stopped) {'
mutant "spec decoder: a prefill token that is a stop id still gets a round" "-ts=spec -tc=the?golden?stop*" \
  'bool stopped = is_stop(head[0]);' \
  'bool stopped = false;'
mutant "spec decoder: the last block not shortened to the budget" "-ts=spec -tc=the?golden?case*" \
  'const int64_t length = std::min(bs, end - start);' \
  'const int64_t length = bs;'
mutant "spec decoder: a round's count not clipped to the budget left" "-ts=spec -tc=the?golden?case*" \
  'const int64_t produced = round_produced(committed, end - start - 1, stop_ids, &stopped);' \
  'const int64_t produced = round_produced(committed, end - start, stop_ids, &stopped);'
mutant "spec decoder: a stop token inside a round's tokens does not cut its count" "-ts=spec -tc=round_produced*" \
  '      return k + 1;' \
  '      return n;'
mutant "spec figures: a prompt without rounds counted in the macro tau" "-ts=spec-command,spec -tc=summarize_spec*" \
  '  f.tau = with_rounds ? tau_sum / double(with_rounds) : 0.0;' \
  '  f.tau = f.prompts ? tau_sum / double(f.prompts) : 0.0;'
mutant "spec --output: finish says length after a stop token" "-ts=spec -tc=*--output*" \
  '{"finish", stopped ? "stop" : "length"},' \
  '{"finish", "length"},'
mutant "spec --output: the completion holds the prompt too" "-ts=spec -tc=*--output*" \
  'const std::vector<int32_t> completion(r.output.begin() + r.prompt_tokens, r.output.end());' \
  'const std::vector<int32_t> completion(r.output.begin(), r.output.end());'
mutant "sampling: the temperature ignored" "-ts=spec-sampling -tc=sampling_probs*" \
  'p[j] = order_key(x[j]) >= floor_key ? std::exp((x[j] - mx) / s.temperature) : 0.0f;' \
  'p[j] = order_key(x[j]) >= floor_key ? std::exp(x[j] - mx) : 0.0f;'
mutant "sampling: top_p drops the token at its boundary" "-ts=spec-sampling -tc=sampling_probs*" \
  '        if (order_key(p[j]) < keep) p[j] = 0;' \
  '        if (order_key(p[j]) <= keep) p[j] = 0;'
mutant "sampling: top_k keeps one token more" "-ts=spec-sampling -tc=sampling_probs*" \
  'const uint32_t floor_key = cut ? kth_largest_key(x, V, s.top_k) : 0;' \
  'const uint32_t floor_key = cut ? kth_largest_key(x, V, s.top_k + 1) : 0;'
mutant "sampling: a draft accepted with the target's probability, not p / q" "-ts=spec-sampling -tc=*chi-square*" \
  'if (!accept_all && !(u * q[(a + 1) * V + d] < p[a * V + d])) break;' \
  'if (!accept_all && !(u < p[a * V + d])) break;'
mutant "sampling: the bonus after a rejection drawn from p, not the residual" "-ts=spec-sampling -tc=*chi-square*" \
  'for (int64_t j = 0; j < V; ++j) total += std::max(0.0f, pa[j] - qa[j]);' \
  'for (int64_t j = 0; j < V; ++j) total += 0.0f * qa[j];'
mutant "sampling: every prompt draws the same stream" "-ts=spec-sampling -tc=*chi-square*" \
  'return splitmix64(splitmix64(seed) ^ uint64_t(prompt_index));' \
  'return splitmix64(seed);'
mutant "export: is_causal written true" "-ts=export" \
  'c["is_causal"] = false;' \
  'c["is_causal"] = true;'
mutant "export: auto_map names another file" "-ts=export" \
  'c["auto_map"] = {{"AutoModel", std::string("modeling_dflash.") + kArchitecture}};' \
  'c["auto_map"] = {{"AutoModel", std::string("modeling.") + kArchitecture}};'
mutant "trackers: a run that starts over continues the old tracker runs" "-ts=trackers" \
  '  if (options.restart) {' \
  '  if (false) {'
mutant "tiny tokenizer: <think> and </think> marked special (dropped when decoding)" "-ts=tiny-tokenizer" \
  'bool special(size_t i) { return i != 3 && i != 4; }' \
  'bool special(size_t i) { return true; }'
mutant "tiny tokenizer: written for a vocabulary without room for it" "-ts=tiny-tokenizer" \
  '  if (vocab_size < kTinyTokenizerMinVocab) return false;' \
  '  if (vocab_size < 2) return false;'
