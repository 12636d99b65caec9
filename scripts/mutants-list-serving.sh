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
