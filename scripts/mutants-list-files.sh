# The mutants of scripts/mutants.sh numbered 144 on (sourced at the end of scripts/mutants-list.sh, so the
# numbers continue): the files no mutant had touched before the twenty-eighth session, and the guards of its fixes.
# --- Files no mutant had touched (twenty-eighth session) ---
mutant "atomic write: a writer that ignores a failed write still renames" "-ts=checkpoint-io" \
  'if (sink_failed) throw OsFailure{' \
  'if (false) throw OsFailure{'
mutant "read_file: a file whose size stat gives as 0 (/proc) reads empty" "-ts=checkpoint-io" \
  'if (got == out.size()) out.resize(out.size() * 2 + 4096);' \
  'if (got == out.size()) break;'
mutant "read_file: a directory read as a file, not refused by name" "-ts=safetensors" \
  'if (rc != 0 || !S_ISREG(st.st_mode)) {' \
  'if (rc != 0) {'
mutant "target config: llama3 high_freq_factor equal to low_freq_factor accepted" "-ts=target" \
  'if (!(s.rope_high_freq_factor > s.rope_low_freq_factor))' \
  'if (!(s.rope_high_freq_factor >= s.rope_low_freq_factor))'
mutant "target config: a size of 0 accepted as a positive integer" "-ts=target" \
  'if (!v.is_number_unsigned() || v.get<int64_t>() <= 0) fail(' \
  'if (!v.is_number_unsigned() || v.get<int64_t>() < 0) fail('
mutant "llama3 rope: the blend between kept and divided frequencies reversed" "-ts=target" \
  'x = (1.0f - smooth) * x / factor + smooth * x;' \
  'x = smooth * x / factor + (1.0f - smooth) * x;'
mutant "target config: an odd head_dim accepted" "-ts=target" \
  'if (s.head_dim % 2 != 0)' \
  'if (false)'
mutant "crc32_file: the CRC restarts at every 4 MiB chunk" "-ts=checkpoint-io" \
  'c.update(buffer.data(), size_t(n));' \
  'c = Crc32(); c.update(buffer.data(), size_t(n));'
mutant "CRC-32: two slice-by-8 tables swapped" "-ts=checkpoint-io" \
  'kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu]' \
  'kTables[3][lo >> 24] ^ kTables[4][hi & 0xffu]'
mutant "memory fit: tied embeddings counted twice" "-ts=bad-input-memory" \
  'product({t.tie_word_embeddings ? 1 : 2, t.vocab_size, H})' \
  'product({2, t.vocab_size, H})'
mutant "memory fit: an exact fit refused" "-ts=bad-input-memory" \
  'if (need.total && *need.total <= available) return;' \
  'if (need.total && *need.total < available) return;'
mutant "memory fit: Adam moments left out of a training worker's need" "-ts=bad-input-memory" \
  '(w.train ? 8 : 0)' \
  '(w.train ? 0 : 0)'
mutant "resume identity: the embedding's checksum not recorded" "-ts=bad-input-resume" \
  'j["target.embed_tokens.crc32"] = sums.embed_tokens;' \
  '(void)sums.embed_tokens;'
mutant "resume identity: llama3 rope factors not recorded" "-ts=bad-input-resume" \
  'if (t.rope_type == RopeType::llama3) {' \
  'if (false) {'
mutant "format_duration: an hour shown as 60m00s" "-ts=trainer" \
  'else if (s < 3600)' \
  'else if (s <= 3600)'
mutant "metrics.jsonl: tokens_per_s holds the step's tokens" "-ts=trainer" \
  '{"tokens_per_s", tokens_per_s}' \
  '{"tokens_per_s", tokens}'
mutant "smallest_bucket_for: the largest bucket that holds it" "-ts=buckets" \
  'buckets[i].seq < buckets[size_t(best)].seq' \
  'buckets[i].seq > buckets[size_t(best)].seq'
mutant "checkpoint: the recomputation runs with grad mode as the backward left it (off)" "-ts=checkpoint" \
  'explicit NestedTape(Context& ctx) : ctx_(ctx), outer_(ctx.swap_tape(&tape_)), grad_(ctx.grad_enabled()) {' \
  'explicit NestedTape(Context& ctx) : ctx_(ctx), outer_(ctx.swap_tape(&tape_)), grad_(ctx.grad_enabled()) { return;'
mutant "checkpoint: a recomputation that takes fewer kept results accepted" "-ts=checkpoint" \
  'DF_CHECK(stash->next_ == stash->kept_.size(),' \
  'DF_CHECK(true,'
mutant "bucket step: the result sums read one slot early" "-ts=eval" \
  'for (int i = 0; i < 7; ++i) out.sums[i] = v[i + 1];' \
  'for (int i = 0; i < 7; ++i) out.sums[i] = v[i];'
mutant "config: a key two edits off gets no suggestion" "-ts=config" \
  'size_t best_d = 3;' \
  'size_t best_d = 2;'
mutant "config: a section's key list includes its subsections' keys" "-ts=config" \
  'std::string(f.key).find('"'"'.'"'"', section.size() + 1) == std::string::npos' \
  'true'
mutant "causal attention: earlier tiles' output not rescaled by a new max" "-tc=*causal_attention*dense*" \
  'if (kt > 0 && correction != 1.0f) scale_row(' \
  'if (false && correction != 1.0f) scale_row('
mutant "causal attention: query heads map to kv heads round-robin" "-tc=*causal_attention*dense*" \
  'const int64_t kv0 = (b * d.S * d.nkv + h / group) * hd;' \
  'const int64_t kv0 = (b * d.S * d.nkv + h % d.nkv) * hd;'
mutant "CE: a label equal to V read past the row instead of NaN" "-ts=ops" \
  'return label >= 0 && int64_t(label) < V;' \
  'return label >= 0 && int64_t(label) <= V;'
mutant "cached attention: the running sum not rescaled by a new max" "-ts=spec" \
  'row_sum *= correction;' \
  '(void)row_sum;'
mutant "argmax_rows: the margin taken against the best itself" "-ts=spec" \
  'if (j != best && row[j] > second) second = row[j];' \
  'if (row[j] > second) second = row[j];'
mutant "copy_rows: the source offset ignored" "-ts=spec" \
  'const int64_t di = d0 + r, si = s0 + r;' \
  'const int64_t di = d0 + r, si = r;'
mutant "spec_accept: the rollback bias ignored" "-ts=spec" \
  'state[f::target_len] = state[f::start] + rollback_bias;  // the rollback' \
  'state[f::target_len] = state[f::start];  // the rollback'
mutant "embedding backward: a repeated id keeps only its last row" "-ts=ops" \
  'for (int64_t j = 0; j < H; ++j) row[j] += d[j];' \
  'for (int64_t j = 0; j < H; ++j) row[j] = d[j];'
mutant "sum backward overwrites the gradient instead of adding" "-ts=ops" \
  'for (int64_t i = 0; i < n; ++i) dx[i] += g;' \
  'for (int64_t i = 0; i < n; ++i) dx[i] = g;'
mutant "loss weights normalised by their count, not their sum" "-ts=drafter" \
  'float denom = float(s) + eps;' \
  'float denom = float(n) + eps;'
mutant "spec_accept: a result without room for the header accepted" "-ts=spec" \
  'check_i32(kOp, result, kSpecRoundHeader + bs, "result");' \
  'check_i32(kOp, result, result.numel(), "result");'
mutant "drafter decode: the context keys' rope positions from the row count, not the offset" "-ts=spec" \
  'const Tensor pos = ops::arange_from(at, R);  // (R)' \
  'const Tensor pos = ops::arange_from(count, R);  // (R)'
mutant "screen: the first sequence with the mask token reported as the last" "-ts=bad-input-data" \
  'if (r.first_mask_sequence < 0) r.first_mask_sequence = i;' \
  'r.first_mask_sequence = i;'
mutant "screen: a sequence of exactly the block size counted as shorter" "-ts=bad-input-data" \
  'if (staged < block_size) ++r.shorter_than_block;' \
  'if (staged <= block_size) ++r.shorter_than_block;'
mutant "offset planner: worst fit instead of best fit" "-ts=seal" \
  'if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;' \
  'if (it->second >= bytes && (best == free_.end() || it->second > best->second)) best = it;'
mutant "offset planner: a freed block at the top does not lower it" "-ts=seal" \
  'if (it->first + it->second == top_) {' \
  'if (false) {'
mutant "copy_to_host from a tensor without memory not refused" "-ts=seal" \
  'DF_CHECK(bytes == 0 || impl().storage->data, "copy_to_host from "' \
  'DF_CHECK(true, "copy_to_host from "'
mutant "reduce_scatter: every rank reduces the first slice" "-ts=ranks" \
  'const int64_t at = int64_t(rank) * count;' \
  'const int64_t at = 0;'
mutant "spec monitor: the decoders' capacity leaves out the new tokens" "-ts=spec" \
  'o.max_len = longest + max_new_;' \
  'o.max_len = longest;'
# --- The checkpoint bug mutant 161's probing found (twenty-eighth session): fixed, and guarded ---
mutant "checkpoint: an output that is an input's alias replaces that input's gradient buffer" "-ts=checkpoint" \
  'if (preset.count(outputs[i].id())) ops::accumulate_(g.at(outputs[i].id()), grads[i]);' \
  'if (false) ops::accumulate_(g.at(outputs[i].id()), grads[i]);'
# --- More files no mutant had touched (twenty-eighth session, second round) ---
mutant "rendezvous: a joiner that reports another world size accepted" "-ts=rendezvous*" \
  'if (world != o.world) {' \
  'if (false) {'
mutant "rendezvous: the timeout names the ranks that arrived, not the missing ones" "-ts=rendezvous*" \
  'if (!by_rank[size_t(k)]) missing +=' \
  'if (by_rank[size_t(k)]) missing +='
mutant "check_same: rank 1 never compared with rank 0" "-ts=ranks" \
  'for (size_t r = 1; r < all.size(); ++r)' \
  'for (size_t r = 2; r < all.size(); ++r)'
mutant "thread coordinator: a later failure replaces the first" "-ts=concurrency" \
  'if (!s_.failure_) s_.failure_ = "rank "' \
  's_.failure_ = "rank "'
mutant "thread all_reduce: slices rounded down leave the tail unreduced" "-ts=concurrency" \
  'int64_t per = (n_ + world_ - 1) / world_;' \
  'int64_t per = n_ / world_;'
mutant "reduce_scatter_: every rank's sum written into the first slice" "-ts=ranks" \
  'float* recv = p + int64_t(rank) * count;' \
  'float* recv = p;'
mutant "program: a body that leaves nodes on the tape recorded" "-ts=seal" \
  'DF_CHECK(ctx.tape().size() == 0,' \
  'DF_CHECK(true,'
mutant "program: a body that throws leaves the context recording" "-ts=seal" \
  'ctx.abort_recording();' \
  '(void)0;'
mutant "static io: stage_out copies the host results onto the device" "-ts=replay" \
  'for (const Slot& s : outputs_) ops::copy_(s.host, s.device);' \
  'for (const Slot& s : outputs_) ops::copy_(s.device, s.host);'
mutant "worker thread: a job's exception swallowed" "-ts=concurrency" \
  'error_ = std::current_exception();' \
  '(void)0;'
mutant "worker thread: a job's exception thrown again at every later wait" "-ts=concurrency" \
  'error_ = nullptr;' \
  '(void)0;'
mutant "recompute ladder: deep bodies still offered partial recomputation" "-ts=checkpoint" \
  'if (segments > kMaxPartialSegments) partial = false;' \
  'if (false) partial = false;'
mutant "available memory: /proc/meminfo's kB read as bytes" "-ts=seal" \
  'if (key == "MemAvailable:") return kb * 1024;' \
  'if (key == "MemAvailable:") return kb;'
mutant "reduction plan: the gradients after the last bucket left out of the rest" "-ts=autograd" \
  'if (at < params.padded_numel()) plan.rest.push_back' \
  'if (false) plan.rest.push_back'
mutant "replica: the target program not recorded for hidden features" "-ts=trainer" \
  'if (step->online() && (opt_.train || opt_.features))' \
  'if (step->online() && opt_.train)'
mutant "spec: --max-new-tokens ignored for the config's" "-ts=spec" \
  'const int64_t max_new = o.max_new_tokens.value_or(cfg.eval.spec_max_new_tokens);' \
  'const int64_t max_new = cfg.eval.spec_max_new_tokens;'
mutant "spec: the note that the drafter's block size wins printed only when the two agree" "-ts=spec" \
  'if (spec.block_size != cfg.drafter.block_size)' \
  'if (spec.block_size == cfg.drafter.block_size)'
mutant "export: --dtype f32 writes bf16" "-ts=export" \
  'export_checkpoint(checkpoint, out, dtype == "f32" ? DType::f32 : DType::bf16);' \
  'export_checkpoint(checkpoint, out, DType::bf16);'
mutant "job: drafter.intermediate_size ignored" "-ts=bad-input-resume" \
  's.intermediate_size = d.intermediate_size ? d.intermediate_size : t.intermediate_size;' \
  's.intermediate_size = t.intermediate_size;'
mutant "job: synthetic eval data generated from the training seed" "-ts=trainer" \
  'uint64_t seed = eval ? syn.seed + 1000003 : syn.seed;' \
  'uint64_t seed = syn.seed;'
mutant "toy model: labels are the current token, not the next" "-ts=toy" \
  'labels[b * size_t(S) + t] = seq[t + 1];' \
  'labels[b * size_t(S) + t] = seq[t];'
mutant "toy model: a layer without its residual" "-ts=toy" \
  'return ops::add(x, ops::linear(a, p.get(lname(l, "down"))));' \
  'return ops::linear(a, p.get(lname(l, "down")));'
mutant "target decoder: the first layer id's features repeated" "-ts=spec" \
  'out.features = ops::concat(out.features, kept[size_t(t.layer_ids_[i])], 1);' \
  'out.features = ops::concat(out.features, kept[size_t(t.layer_ids_[0])], 1);'
mutant "stop tokens: an eos_token_id equal to the vocabulary size accepted" "-ts=spec,bad-input" \
  'v.get<int64_t>() < vocab_size,' \
  'v.get<int64_t>() <= vocab_size,'
mutant "random target: weights of standard deviation std / sqrt(3)" "-ts=target" \
  'const float half_width = float(std * std::sqrt(3.0));' \
  'const float half_width = float(std);'
mutant "synthetic: greedy generation may emit the mask token" "-ts=data,config-effects" \
  'if (v != mask_token_id && row[v] > best) best = row[v], next = int32_t(v);' \
  'if (row[v] > best) best = row[v], next = int32_t(v);'
mutant "synthetic: the prompt's last token trained on" "-ts=trainer" \
  'for (int64_t i = 0; i < c.prompt_length; ++i) s.loss_mask[size_t(i)] = 0;' \
  'for (int64_t i = 0; i + 1 < c.prompt_length; ++i) s.loss_mask[size_t(i)] = 0;'
mutant "fill_batch: a truncated sequence counts its untruncated length" "-ts=data" \
  'real_tokens += len;' \
  'real_tokens += s.length();'
mutant "planner: a truncated sequence without an anchor still counted as truncated" "-ts=bad-input-data" \
  'if (lengths_[i] > max_seq) --truncated_;' \
  '(void)0;'
mutant "dflash_prepare: a keep of another shape accepted" "-ts=drafter" \
  'check_shape("dflash_prepare", keep, {B, N}, "keep");' \
  '(void)0;'
mutant "CLI: --flag=value keeps the '='" "-ts=bad-input" \
  'if (s.rfind(f + "=", 0) == 0) v = s.substr(f.size() + 1);' \
  'if (s.rfind(f + "=", 0) == 0) v = s.substr(f.size());'
mutant "CLI: --max-new-tokens 0 accepted" "-ts=bad-input,spec" \
  'if (used != a.max_new_tokens.size() || v < 1)' \
  'if (used != a.max_new_tokens.size() || v < 0)'
mutant "CLI: an empty flag value taken as not given" "-ts=bad-input -tc=*max-new-tokens*" \
  'if (v.empty()) usage_error(' \
  'if (false) usage_error('
# --- Twenty-ninth session: the GEMM tuner's pick (a GPU mutant that survived there) ---
mutant "GEMM tuner: the fastest candidate picked even when cuBLAS's check refused it" "-ts=gemm-table" \
  'if (c.agrees && (!best || c.ms < best->ms)) best = &c;' \
  'if (!best || c.ms < best->ms) best = &c;'
# --- The twenty-ninth session's mutants: the ops' wiring, then the model, data and trainer files ---
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-ops.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-model.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-ops-kernels.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-thin.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-state.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-inline.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-serving.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-python.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-records.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-folders.sh"
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-heuristics.sh"
# Opt-in (full rebuilds): the mutants in headers nearly every file includes.
if [ "${DFLASH_MUTANTS_HEADERS:-0}" = 1 ]; then source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-headers.sh"; fi
