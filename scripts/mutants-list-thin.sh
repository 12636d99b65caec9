# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh): the files that earlier mutants
# touched least for their size (safetensors, data, config keys, profile, context, spec eval, target, rendezvous, overlap).
mutant "safetensors: U8 read as ints sign-extended (bytes over 127 come out negative)" "-ts=thin-wiring -tc=safetensors*" \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];' \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = int8_t(p[i]);'
mutant "safetensors writer: a header already 8-byte aligned padded with 8 more spaces" "-ts=thin-wiring -tc=safetensors*" \
  'text.append((8 - text.size() % 8) % 8, '"'"' '"'"');' \
  'text.append(8 - text.size() % 8, '"'"' '"'"');'
mutant "safetensors: a missing tensor's message lists 7 of the names, not 6" "-ts=thin-wiring -tc=safetensors*" \
  'for (size_t i = 0; i < names_.size() && i < 6; ++i)' \
  'for (size_t i = 0; i < names_.size() && i <= 6; ++i)'
mutant "data planner: the shuffle never leaves a sequence in place (Sattolo, not Fisher-Yates)" "-ts=thin-wiring -tc=planner*" \
  'std::swap(p[i - 1], p[size_t(uniform_below(rng, i))]);' \
  'std::swap(p[i - 1], p[size_t(uniform_below(rng, i - 1))]);'
mutant "data planner: a saved pending group as large as its batch accepted" "-ts=thin-wiring -tc=planner*" \
  'sane = int64_t(s.pending[b].size()) < buckets_[b].batch;' \
  'sane = int64_t(s.pending[b].size()) <= buckets_[b].batch;'
mutant "data planner: the last bucket never taken as the largest (truncation into a smaller one)" "-ts=thin-wiring -tc=planner*" \
  'for (size_t b = 1; b < buckets_.size(); ++b)' \
  'for (size_t b = 1; b + 1 < buckets_.size(); ++b)'
mutant "config keys: a key's leaf taken after its first dot, not its last" "-ts=thin-wiring -tc=config?keys*" \
  'std::string leaf_of(const std::string& key) { return key.substr(key.rfind('"'"'.'"'"') + 1); }' \
  'std::string leaf_of(const std::string& key) { return key.substr(key.find('"'"'.'"'"') + 1); }'
mutant "config keys: a substitution counted as two edits (two typos no longer suggested)" "-ts=thin-wiring -tc=config?keys*" \
  'diag + (a[i - 1] == b[j - 1] ? 0 : 1)' \
  'diag + (a[i - 1] == b[j - 1] ? 0 : 2)'
mutant "config keys: a 10-character fixed number printed in scientific notation" "-ts=thin-wiring -tc=config?keys*" \
  'if (fixed.size() <= 10) return fixed;' \
  'if (fixed.size() < 10) return fixed;'
mutant "profile: a row's time summed over the replays, not averaged" "-ts=thin-wiring -tc=profile*" \
  'r.ms += times_ms[i] / double(replays);' \
  'r.ms += times_ms[i];'
mutant "profile: tracing's cost per call divided by the rows, not the calls" "-ts=thin-wiring -tc=profile*" \
  'for (const ProfileRow& r : in.rows) calls += r.calls;' \
  'for (const ProfileRow& r : in.rows) calls += 1;'
mutant "profile: a row's share of the kernels' time only, idle left out" "-ts=thin-wiring -tc=profile*" \
  'total > 0 ? 100.0 * r.ms / total : 0.0, work.c_str(), rate.c_str());' \
  'kernels > 0 ? 100.0 * r.ms / kernels : 0.0, work.c_str(), rate.c_str());'
mutant "context: a begin() inside another recording accepted" "-ts=thin-wiring -tc=context*" \
  'DF_CHECK(mode_ == Mode::eager, "begin(" << mode_name(mode) << ", '"'"'" << program << "'"'"') while already in "' \
  'DF_CHECK(true, "begin(" << mode_name(mode) << ", '"'"'" << program << "'"'"') while already in "'
mutant "context: a CPU recording without a sink for its kernel calls accepted" "-ts=thin-wiring -tc=context*" \
  'DF_CHECK(mode != Mode::record || device_.is_cuda() || cpu_sink,' \
  'DF_CHECK(mode != Mode::record || device_.is_cpu() || cpu_sink,'
mutant "context: a persistent allocation after the seal accepted" "-ts=thin-wiring -tc=context*" \
  'if (sealed_) refuse_sealed("persistent allocation", bytes);' \
  '(void)0;'
mutant "spec figures: a round that accepts the whole block left out of the histogram" "-ts=spec*" \
  'if (a >= 1 && a <= block_size) ++f.histogram[size_t(a - 1)];' \
  'if (a >= 1 && a < block_size) ++f.histogram[size_t(a - 1)];'
mutant "spec prompts: a data sequence trained on from its first token gives an empty prompt" "-ts=thin-wiring -tc=spec*" \
  'if (first == s.loss_mask.end() || cut == 0) {' \
  'if (first == s.loss_mask.end()) {'
mutant "spec stop ids: a stop id equal to the vocabulary size accepted" "-ts=thin-wiring -tc=spec*" \
  'DF_CHECK(id < vocab, "eval.spec_stop_token_ids holds "' \
  'DF_CHECK(id <= vocab, "eval.spec_stop_token_ids holds "'
mutant "target: weights holding exactly one layer too many get no num_hidden_layers hint" "-tc=*beyond?num_hidden_layers*" \
  'if (highest_layer >= s.num_hidden_layers)' \
  'if (highest_layer > s.num_hidden_layers)'
mutant "target: the count of unexplained tensors left unlisted is all of them, not those past 8" "-ts=thin-wiring -tc=target*" \
  'if (extra.size() > 8) list += ", and " + std::to_string(extra.size() - 8) + " more";' \
  'if (extra.size() > 8) list += ", and " + std::to_string(extra.size()) + " more";'
mutant "rendezvous: port 65536 accepted (wraps to 0, an ephemeral port)" "-ts=thin-wiring -tc=rendezvous*" \
  'DF_CHECK(o.port >= 1 && o.port <= 65535, "rendezvous: port "' \
  'DF_CHECK(o.port >= 1 && o.port <= 65536, "rendezvous: port "'
mutant "rendezvous: a rank equal to the world size accepted" "-ts=thin-wiring -tc=rendezvous*" \
  'DF_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world,' \
  'DF_CHECK(o.world >= 1 && o.rank >= 0 && o.rank <= o.world,'
mutant "rendezvous watch: a later failure replaces the first one recorded" "-ts=thin-wiring -tc=rendezvous*" \
  'if (s.failure) return false;' \
  'if (false) return false;'
mutant "rendezvous watch: this rank's own failure after finish() dropped" "-ts=thin-wiring -tc=rendezvous*" \
  'if (print && s.finished) return false;' \
  'if (s.finished) return false;'
mutant "overlap: a parameter's layer read from the first digit only (layers.12 is layer 1)" "-ts=thin-wiring -tc=overlap*" \
  'return {std::stoll(name.substr(7, dot - 7)), mlp ? LayerGrads::mlp : LayerGrads::all};' \
  'return {std::stoll(name.substr(7, 1)), mlp ? LayerGrads::mlp : LayerGrads::all};'
mutant "overlap: post_attention_layernorm put in the attention half" "-ts=autograd -tc=*overlap*" \
  'const bool mlp = rest.rfind("mlp.", 0) == 0 || rest.rfind("post_attention_layernorm.", 0) == 0;' \
  'const bool mlp = rest.rfind("mlp.", 0) == 0;'
mutant "adamw over ranks: the gradient scale applied from the start of the buffer, not this rank's slice" "-ts=ranks -tc=sharded*" \
  'x.launch([=] { kernels::cpu::scale_inplace(g + at, len, grad_scale); });' \
  'x.launch([=] { kernels::cpu::scale_inplace(g, len, grad_scale); });'
