# The mutants of scripts/mutants.sh (sourced by it), grouped by the work that added them; see mutant() there.
# Each snippet (OLD) must occur exactly once in the sources outside tests/, scripts/ and docs/.
# --- Trainer wiring (issue 12: each survived every CPU test before the reference tests) ---
mutant "applied gradient scaled by 1/k, not 1/(k*W)" "-ts=trainer-reference" \
  'grad_scale_ = 1.0f / float(o.micro_batches * world_);' \
  'grad_scale_ = 1.0f / float(o.micro_batches);'
mutant "applied gradient scaled by 1/W, not 1/(k*W)" "-ts=trainer-reference" \
  'grad_scale_ = 1.0f / float(o.micro_batches * world_);' \
  'grad_scale_ = 1.0f / float(world_);'
mutant "gradients not all-reduced across workers" "-ts=trainer-reference" \
  'else all_reduce_(comm, params_.flat_grads(), rank);' \
  'else (void)rank;'
mutant "logged step loss divided by k*W - 1, not k*W" "-ts=trainer-reference" \
  'r.loss /= n;' \
  'r.loss /= std::max(1.0, n - 1);'
mutant "logged accuracy divided by k*W - 1, not k*W" "-ts=trainer-reference" \
  'r.accuracy /= n;' \
  'r.accuracy /= std::max(1.0, n - 1);'
mutant "logged tokens: only the last micro-batch's" "-ts=trainer-reference" \
  'slot.tokens = fill_batch(seqs, bucket, job_.drafter.block_size, rng,' \
  'slot.tokens = (j + 1 < c.training.grad_accum ? 0 : 1) * fill_batch(seqs, bucket, job_.drafter.block_size, rng,'
mutant "every micro-batch samples its anchors from the same seed" "-ts=trainer-reference" \
  'std::mt19937_64 rng(mb.anchor_seed(c.job.seed));' \
  'std::mt19937_64 rng(c.job.seed);'
mutant "max_grad_norm forced to 0 (clipping off)" "-ts=trainer-reference" \
  'opt.max_grad_norm = float(c.training.max_grad_norm);' \
  'opt.max_grad_norm = 0.0f;'
mutant "warm start loaded into rank 0's replica only" "-ts=trainer-reference" \
  'if (!c.drafter.init.empty()) {' \
  'if (!c.drafter.init.empty() && w == 0) {'
mutant "warmup_steps forced to 0" "-ts=trainer-reference,config-effects" \
  'opt.warmup_steps = int64_t(std::llround(c.training.warmup_ratio * double(c.training.steps)));' \
  'opt.warmup_steps = 0;'
mutant "warmup counted in micro-batches" "-ts=trainer-reference" \
  'opt.warmup_steps = int64_t(std::llround(c.training.warmup_ratio * double(c.training.steps)));' \
  'opt.warmup_steps = int64_t(std::llround(c.training.warmup_ratio * double(c.training.steps * c.training.grad_accum)));'
mutant "min_lr_ratio ignored" "-ts=trainer-reference,config-effects" \
  'opt.min_lr_ratio = float(c.training.min_lr_ratio);' \
  'opt.min_lr_ratio = 0.0f;'
mutant "rank check after the all-reduce removed" "-tc=*disagree*" \
  'DF_CHECK(std::memcmp(stats_[w].data(), stats_[0].data(), sizeof(float) * 2) == 0 || std::isnan(stats_[0][0]),' \
  'DF_CHECK(true || std::isnan(stats_[0][0]),'
# --- Keys whose effect the config-effects suite pins down ---
mutant "eval_every: eval one step late" "-ts=config-effects" \
  'if (eval_ && root && c.training.eval_every > 0 && step % c.training.eval_every == 0 && step < total)' \
  'if (eval_ && root && c.training.eval_every > 0 && step % c.training.eval_every == 1 && step < total)'
mutant "checkpoint.every ignored" "-ts=config-effects" \
  'if (c.checkpoint.every > 0 && step % c.checkpoint.every == 0 && step < total) {' \
  'if (false) {'
mutant "checkpoint.keep keeps one more" "-ts=config-effects" \
  'prune_checkpoints(c.job.dump_folder, c.checkpoint.keep, &prune_warnings);' \
  'prune_checkpoints(c.job.dump_folder, c.checkpoint.keep + 1, &prune_warnings);'
mutant "checkpoint.resume = false ignored" "-ts=config-effects" \
  'if (!c.checkpoint.resume) return 0;' \
  'if (false) return 0;'
mutant "memory_limit_gb not split among CPU workers" "-ts=config-effects" \
  '    bytes /= job.devices.size();' \
  '    bytes /= 1;'
mutant "drafter.rope_theta ignored" "-ts=config-effects" \
  's.rope_theta = d.rope_theta > 0 ? d.rope_theta : t.rope_theta;' \
  's.rope_theta = t.rope_theta;'
mutant "data.synthetic.temperature ignored (always greedy)" "-ts=config-effects" \
  'if (c.temperature <= 0) {' \
  'if (true) {'
mutant "prepare ignores data.shards" "-ts=config-effects" \
  'fs::path root = cfg.data.shards.empty() ? cfg.job.dump_folder / "shards" : cfg.data.shards;' \
  'fs::path root = cfg.job.dump_folder / "shards";'
mutant "offline training ignores data.hidden" "-ts=config-effects" \
  'fs::path dir = c.data.hidden.empty() ? c.job.dump_folder / "hidden" : c.data.hidden;' \
  'fs::path dir = c.job.dump_folder / "hidden";'
mutant "recording-differs-from-plan check removed" "-ts=seal" \
  'DF_CHECK(p.arena_bytes() == reports_[i].arena_bytes && p.kernels() == reports_[i].kernels,' \
  'DF_CHECK(true,'
# --- Optimizer kernels ---
mutant "Adam bias correction one step late" "-ts=optimizer" \
  'float bc1 = float(1.0 - std::pow(double(h.beta1), t));' \
  'float bc1 = float(1.0 - std::pow(double(h.beta1), t + 1.0));'
mutant "gradients not zeroed after the update" "-ts=trainer-reference" \
  'if (zero_grads_) x.launch([=] { kernels::cpu::fill_zero(g, size_t(n) * sizeof(float)); });  // micro-batches add to 0' \
  '(void)0;'
mutant "cosine reaches min_lr one step after the last" "-ts=trainer-reference,config-effects" \
  'int64_t span = s.total_steps - 1 - s.warmup_steps;' \
  'int64_t span = s.total_steps - s.warmup_steps;'
mutant "clipping also scales gradients below the bound" "-ts=optimizer,trainer-reference" \
  'if (c >= 1.0f) return;' \
  'if (c > 1e30f) return;'
# --- DFlash kernels (issue 12: these were caught before; they must stay caught) ---
mutant "mask: the anchor itself visible as context" "-ts=attention" \
  'anchor = raw < 0 ? 0 : (raw > d.S ? d.S : raw);' \
  'anchor = raw < 0 ? 0 : (raw >= d.S ? d.S : raw + 1);'
mutant "RoPE: wrong sign of the rotation" "-ts=ops" \
  'yr[h * hd + i] = x1 * c - x2 * s;' \
  'yr[h * hd + i] = x1 * c + x2 * s;'
mutant "RoPE forward adds into its output (reads what the arena held)" "-tc=*arena*filled*with*NaN*" \
  'yr[h * hd + i] = x1 * c - x2 * s;' \
  'yr[h * hd + i] += x1 * c - x2 * s;'
mutant "loss decay exponent k, not k-1" "-ts=drafter" \
  'lw[slot] = d.gamma > 0 ? wk * std::exp(-float(k - 1) / d.gamma) : wk;' \
  'lw[slot] = d.gamma > 0 ? wk * std::exp(-float(k) / d.gamma) : wk;'
mutant "anchor bound p < len - bs, not p <= len - bs" "-ts=data" \
  'for (int64_t p = 0; p <= s.length() - block_size; ++p)' \
  'for (int64_t p = 0; p < s.length() - block_size; ++p)'
mutant "tau run does not stop at the first miss" "-ts=drafter" \
  'if (hit) hits += 1;' \
  'if (hit) hits += 1; if (hit && k > 0 && !run) ++accepted;'
# --- Speed work (issue 7): what it skips must stay unneeded ---
mutant "a checkpointed layer skips its tail in the first pass too" "-ts=drafter" \
  'SkipLaunches tail(replay);' \
  'SkipLaunches tail(stash != nullptr);'
mutant "runtime.arena_gb ignored" "-ts=config-effects" \
  'o.arena_budget = size_t(c.runtime.arena_gb * double(1ull << 30));' \
  'o.arena_budget = 0;'
mutant "an arena budget does not lower the recomputation" "-ts=seal" \
  'const size_t target = std::max(largest, arena_budget_);' \
  'const size_t target = largest;'
mutant "a checkpointed layer recomputes its tail again" "-ts=profile" \
  'SkipLaunches tail(replay);' \
  'SkipLaunches tail(false);'
mutant "swiglu backward adds a fresh gradient to what its buffer held" "-tc=*arena*filled*with*NaN*" \
  'if (dg) dg[i] = (dg_fresh ? 0.0f : dg[i]) +' \
  'if (dg) dg[i] = (dg_fresh ? dg[i] : dg[i]) +'
mutant "rope backward adds a fresh gradient to what its buffer held" "-tc=*fresh*dx*is*written*" \
  'dxr[h * hd + i] = (dx_fresh ? 0.0f : dxr[h * hd + i]) + a;' \
  'dxr[h * hd + i] = (dx_fresh ? dxr[h * hd + i] : dxr[h * hd + i]) + a;'
mutant "rope backward overwrites a gradient another consumer wrote first" "-tc=*rope*backward*finite*" \
  '(dx_fresh ? 0.0f : dxr[h * hd + i + half]) + b;' \
  '(0.0f) + b;'
mutant "rmsnorm backward adds a fresh dx to what its buffer held" "-tc=*fresh*dx*is*written*" \
  'dxr[j] = (dx_fresh ? 0.0f : dxr[j]) + term;' \
  'dxr[j] = (dx_fresh ? dxr[j] : dxr[j]) + term;'
mutant "a wgmma descriptor advanced by twice its k-step" "-ts=attention-sm90-layout" \
  'return desc + uint64_t(bytes >> 4); }' \
  'return desc + uint64_t(bytes >> 3); }'
mutant "fused dq: K's second half read from the wrong slab" "-ts=attention-sm90-layout" \
  'uint32_t(wg) * slab_bytes(64), 64, 0,' \
  'uint32_t(wg) * slab_bytes(128), 64, 0,'
mutant "fused dq: dS^T elements stored 4 bytes apart in their piece" "-ts=attention-sm90-layout" \
  'return piece_offset(128, key, row / 8) + uint32_t(row % 8) * 2u;' \
  'return piece_offset(128, key, row / 8) + uint32_t(row % 8) * 4u;'
mutant "the lm_head's dropped slot-0 rows get a gradient" "-ts=drafter" \
  'restore(dy, dx, groups, row_bytes, period, 0);' \
  'restore(dy, dx, groups, row_bytes, period, 0x3F);'
mutant "a layer recomputed in part takes the up projection's kept values for gate" "-tc=*every*recompute*choice*" \
  'adopt_kept_values(gate, kept[1]);' \
  'adopt_kept_values(gate, kept[2]);'
mutant "a layer recomputed in part runs its gate and up projections again" "-ts=profile" \
  'SkipLaunches skip_gate_up(kept_mlp && replay);' \
  'SkipLaunches skip_gate_up(false);'
mutant "swiglu backward reads gate after writing its gradient over it" "-tc=*swiglu*backward*writes*" \
  'if (du) du[i] = (du_fresh ? 0.0f : du[i]) + d * gi * s;' \
  'if (du) du[i] = (du_fresh ? 0.0f : du[i]) + d * g[i] * s;'
mutant "a gradient takes the storage of an input that is still held elsewhere" "-tc=*swiglu*backward*writes*" \
  'donor.impl_ptr().use_count() == 1 && donor.impl().storage.use_count() == 1' \
  'donor.impl_ptr().use_count() >= 1 && donor.impl().storage.use_count() >= 1'
mutant "a gradient takes the storage of an input that a view still reads" "-tc=*swiglu*backward*writes*" \
  'use_count() == 1 && donor.impl().storage.use_count() == 1 &&' \
  'use_count() == 1 && true &&'
mutant "offline placement ignores blocks that die after this one starts" "-tc=*offline*placement*" \
  'if (blocks[j].start < b.end && b.start < blocks[j].end) busy.emplace_back' \
  'if (blocks[j].start < b.end && b.start < blocks[j].start) busy.emplace_back'
mutant "a recording given its plan's placement still uses the online offsets" "-tc=*placement*offsets*" \
  'offset = placement_->offsets[placed_++];' \
  'offset = online + 0 * placement_->offsets[placed_++];'
mutant "the outputs of skipped ops take arena memory" "-tc=*SkipLaunches*scope*" \
  'const bool unread = skip_launches_ > 0;' \
  'const bool unread = false;'
mutant "a fresh leaf gradient is overwritten by every use, not only the first" "-tc=*FreshLeafGrads*" \
  'return ids_.count(leaf.id()) != 0 && touched_.insert(leaf.id()).second;' \
  'return ids_.count(leaf.id()) != 0 && (touched_.insert(leaf.id()), true);'
mutant "an op that only adds keeps a fresh leaf's stale gradient" "-tc=*FreshLeafGrads*" \
  'f && f->first_touch(t)) ops::fill_(t.grad(), 0.0f);' \
  'f && f->first_touch(t)) (void)0;'
mutant "leaves no backward reached keep last step's gradients" "-tc=*FreshLeafGrads*" \
  'if (touched_.insert(l.id()).second) ops::fill_(l.grad(), 0.0f);' \
  'if (touched_.insert(l.id()).second) (void)l;'
mutant "the trainer's update leaves gradients unzeroed with several micro-batches" "-ts=trainer-reference" \
  'const bool fresh_grads = o.train && o.grad_accum == 1;' \
  'const bool fresh_grads = o.train;'
mutant "a GEMM table line loses its beta flag when read back" "-ts=gemm-table" \
  'k.ta = ta == '"'"'T'"'"', k.tb = tb == '"'"'T'"'"', k.ab_bf16 = ab_s == "bf16", k.c_bf16 = c_s == "bf16", k.accumulate = beta == 1;' \
  'k.ta = ta == '"'"'T'"'"', k.tb = tb == '"'"'T'"'"', k.ab_bf16 = ab_s == "bf16", k.c_bf16 = c_s == "bf16", k.accumulate = false;'

mutant "the GEMM table writes cuBLAS's own algorithm as nine integers" "-ts=gemm-table" \
  'if (is_cublas_default(c)) line += " cublas";' \
  'if (false) line += " cublas";'
mutant "the GEMM table reads -1 0 0 0 0 0 0 0 0 as a cuBLASLt algorithm" "-ts=gemm-table" \
  'ok = ok && !is_cublas_default(cfg);  // -1 0 ... 0 is written "cublas"' \
  'ok = ok;'

mutant "the decoder's programs are recorded without the profiler's labels" "-ts=profile" \
  'ctx_->attach_profile(o.profile);' \
  'ctx_->attach_profile(nullptr);'

mutant "the profile check adds the traced gaps to the kernels instead of bounding the idle by them" "-ts=profile" \
  'if (reference > most) return (reference - most) / reference;' \
  'if (reference != most) return std::fabs(reference - most) / reference;'

mutant "the profile check holds the kernels against the untraced replay, not the traced one they come from" "-ts=profile" \
  'double profile_reference_ms(const ProfileTableInput& in) { return in.traced_ms > 0 ? in.traced_ms : in.measured_ms; }' \
  'double profile_reference_ms(const ProfileTableInput& in) { return in.measured_ms; }'

mutant "the profile counts the target's causal attention over every (query, key) pair, not the visible half" "-ts=profile" \
  'note_flop_cost(4.0 * double(hd * nh * B) * double(S) * double(S + 1) / 2.0, "causal attention forward");' \
  'note_flop_cost(4.0 * double(hd * nh * B) * double(S) * double(S), "causal attention forward");'

mutant "the profile leaves the optimizer's norm pass out of the update's bytes" "-ts=profile" \
  'note_bytes_cost(double(n) * (34.0 + (zero_grads_ ? 4.0 : 0.0)));' \
  'note_bytes_cost(double(n) * (30.0 + (zero_grads_ ? 4.0 : 0.0)));'

mutant "the recompute hint ignores runtime.memory_limit_gb" "-ts=config-effects" \
  'if (arena_limit_bytes > 0 && without > arena_limit_bytes) return "";' \
  'if (false) return "";'

# --- Failures across processes (issue 8) ---
mutant "an abort hook installed after the watchdog saw a failure never runs" "-ts=rendezvous" \
  'abort_if_wanted();  // a hook installed after the failure was seen' \
  '(void)0;  // a hook installed after the failure was seen'
mutant "the MLP half's hook runs before the post-attention norm's backward" "-tc=*drafter's?hook*" \
  'Tensor y = ops::rmsnorm(h1, p.get(P(l, "post_attention_layernorm.weight")), eps);  // (B, T, H)' \
  'Tensor y = ops::rmsnorm(h1, p.get(P(l, "post_attention_layernorm.weight")), eps); if (layer_hook_) y = grad_hook(y, [hook = layer_hook_, l] { hook(l, LayerGrads::mlp); });'
mutant "layer 0's attention half is reduced as a bucket before its backward ends" "-tc=*overlap's?buckets*" \
  'if (layers > 0) plan.attention[0] = {0, 0};' \
  '(void)0;'

# --- Audit 2026-12-01: export, speculative decoding, resume ---
mutant "export --dtype bf16 writes f32 anyway" "-tc=*SGLang?format*" \
  'export_drafter(out_dir, d.spec, store, dtype);' \
  'export_drafter(out_dir, d.spec, store, DType::f32);'
mutant "a plain checkpoint resumed into a sharded run swaps Adam m and v" "-tc=*plain?checkpoint?resumes?into?a?sharded*" \
  'else copy(moments_->bytes(kind + "." + p.name), p.offset, p.count);' \
  'else copy(moments_->bytes((kind == "m" ? std::string("v") : std::string("m")) + "." + p.name), p.offset, p.count);'
mutant "an epoch's partial groups flushed in reverse bucket order" "-tc=*partial?groups?last*" \
  'for (size_t b = 0; b < pending_.size(); ++b)' \
  'for (size_t b = pending_.size(); b-- > 0;)'
mutant "the lossless check reports the margin one new token late" "-tc=*lossless?check?names*" \
  'const size_t k = i - p.ids.size();' \
  'const size_t k = i - p.ids.size() + 1;'
mutant "the target-alone baseline decodes past a stop token" "-tc=*golden?stop-token?example*" \
  'while (int64_t(d.output.size()) < end && !is_stop(d.output.back())) {' \
  'while (int64_t(d.output.size()) < end) {'
mutant "spec figures: TPOT not divided by the prompt's new tokens" "-tc=*summarize_spec:?tokens/s*" \
  'tpot_spec += r.spec_s / tokens;' \
  'tpot_spec += r.spec_s;'
mutant "decode refuses prompt + max_new equal to max_position_embeddings" "-tc=*check_decode_prompt:?prompt*" \
  'DF_CHECK(max_positions <= 0 || need <= max_positions,' \
  'DF_CHECK(max_positions <= 0 || need < max_positions,'
mutant "a step-05 folder counts as checkpoint step 5" "-tc=*only?canonical?step-N*" \
  "(digits.size() > 1 && digits[0] == '0')) return std::nullopt;" \
  'false) return std::nullopt;'

# --- Audit 2026-12-01 (2): shards, anchors, eval ---
mutant "hidden rows: a sequence as long as the largest bucket dropped under skip" "-tc=*hidden?shards:?f32*" \
  'rows[i] = lengths[i] <= max_seq ? lengths[i]' \
  'rows[i] = lengths[i] < max_seq ? lengths[i]'
mutant "hidden under skip: a too-long sequence stored before the waiting group" "-tc=*hidden?under?data.overflow*" \
  'if (rows[size_t(i)] == 0) {  // skipped by the overflow policy: stored empty' \
  'if (rows[size_t(i)] == 0) { writer->append(nullptr, 0); continue; } if (false) {'
mutant "training anchors of a truncated sequence drawn from S - 1 tokens" "-tc=*fill_batch:?layout*" \
  'anchors.push_back(s.length() > bucket.seq ? sample_anchors(truncate_sequence(s, bucket.seq), bucket.anchors, block_size, rng)' \
  'anchors.push_back(s.length() > bucket.seq ? sample_anchors(truncate_sequence(s, bucket.seq - 1), bucket.anchors, block_size, rng)'
mutant "eval anchors taken from the untruncated sequence" "-tc=*eval?under?data.overflow*" \
  '    Sequence s = truncate_sequence(data.get(i), len);' \
  '    Sequence s = data.get(i);'
mutant "eval: a too-long sequence skipped but not counted" "-tc=*eval?under?data.overflow*" \
  '        ++r.skipped;' \
  '        (void)0;'
mutant "eval: sequences counted once per anchor pass" "-tc=*eval?under?data.overflow*" \
  '    ++r.sequences;' \
  '    r.sequences += int64_t(passes.size());'
mutant "safetensors BOOL loaded as u8 keeps bytes other than 0 and 1" "-tc=*conversions?from?F16*" \
  'for (uint8_t& x : b) x = x != 0;' \
  'for (uint8_t& x : b) (void)x;'
mutant "safetensors BOOL read as ints keeps bytes other than 0 and 1" "-tc=*conversions?from?F16*" \
  'out[i] = p[i] != 0;' \
  'out[i] = p[i];'
mutant "token shards: a loss_mask byte other than 0 or 1 read as is" "-tc=*token?shards:?every?damaged*" \
  'bad |= uint32_t(seq.input_ids[j]) >= uint64_t(vocab_size_) || seq.loss_mask[j] > 1;' \
  'bad |= uint32_t(seq.input_ids[j]) >= uint64_t(vocab_size_);'
mutant "eval progress: a bucket's last partial micro-batch left out of the total" "-tc=*eval?s?progress*" \
  'for (size_t b = 0; b < buckets.size(); ++b) total += (int64_t(rows[b].size()) + buckets[b].batch - 1) / buckets[b].batch;' \
  'for (size_t b = 0; b < buckets.size(); ++b) total += int64_t(rows[b].size()) / buckets[b].batch;'

# --- The target's fused norms (issue 7, 2026-12-01) and the drafter's residual adds in GEMM
# epilogues (2026-12-02): wiring of the fused ops ---
mutant "rmsnorm_rope: q rotated as if it had k's head count" "-tc=*rmsnorm_rope?gives*" \
  'kernels::cpu::rope_forward(pyq, pp, pf, pyq, rows, hq, hd);' \
  'kernels::cpu::rope_forward(pyq, pp, pf, pyq, rows, hk, hd);'
mutant "rmsnorm_rope: k normed with q's weight" "-tc=*rmsnorm_rope?gives*" \
  'kernels::cpu::rmsnorm_forward(pk, pwk, pyk, nullptr, rows * hk, hd, eps);' \
  'kernels::cpu::rmsnorm_forward(pk, pwq, pyk, nullptr, rows * hk, hd, eps);'
mutant "target: the fused residual add drops its first operand" "-ts=target*" \
  'if (w) return ops::add_rmsnorm(a, b, *w, eps);' \
  'if (w) return ops::add_rmsnorm(b, b, *w, eps);'
mutant "drafter: the attention's residual add in the o projection takes the normed input" "-ts=drafter" \
  'nh * hd}), p.get(P(l, "self_attn.o_proj.weight")), h);' \
  'nh * hd}), p.get(P(l, "self_attn.o_proj.weight")), x);'
mutant "linear_residual: the residual gets no gradient" "-tc=linear_residual:*" \
  'if (r.defined() && r.requires_grad()) g.pass(r, dc);' \
  '(void)r;'
mutant "linear_residual on the CPU: the residual not added" "-tc=linear_residual:*" \
  'ctx().launch([=, n = M * N] { kernels::cpu::add_forward(r, c, c, n); });' \
  '(void)r;'
mutant "swiglu_halves: the halves swapped (silu of up, times gate)" "-tc=*swiglu_halves?gives*" \
  'kernels::cpu::swiglu_forward(pg + 2 * I * r, pg + 2 * I * r + I, py + I * r, I);' \
  'kernels::cpu::swiglu_forward(pg + 2 * I * r + I, pg + 2 * I * r, py + I * r, I);'
mutant "target: up_proj loaded into the packed weight's gate rows" "-ts=target*" \
  'load_into(layer_key(l, "mlp.gate_proj.weight"), p.gate);' \
  'load_into(layer_key(l, "mlp.up_proj.weight"), p.gate);'
mutant "safetensors load_into: a view of the wrong shape accepted" "-tc=*load_into*" \
  'DF_CHECK(dst.shape() == shape, where(name)' \
  'DF_CHECK(true, where(name)'
mutant "concat_all: every part written at the row's start" "-tc=concat_all*" \
  'offset += inner[i];' \
  'offset += 0 * inner[i];'
mutant "target features: the layers joined last to first" "-ts=target*" \
  'for (int64_t id : layer_ids_) parts.push_back(kept[size_t(id)]);' \
  'for (int64_t id : layer_ids_) parts.insert(parts.begin(), kept[size_t(id)]);'
mutant "sharded checkpoint: the manifest's version not checked" "-tc=a?damaged?sharded?checkpoint*" \
  'DF_CHECK(m.at("format") == kManifestFormat && m.at("version") == kManifestVersion,' \
  'DF_CHECK(m.at("format") == kManifestFormat,'
mutant "sharded checkpoint: a shard's tensors not held to the manifest's count" "-tc=a?damaged?sharded?checkpoint*" \
  'sh.file->info(kind).dtype == "F32" && sh.file->info(kind).numel() == sh.count,' \
  'sh.file->info(kind).dtype == "F32",'
mutant "shard writers keep an earlier run's stale shards" "-tc=*stale?shards?removed*" \
  'if (name.starts_with(stem + "-") && name.ends_with(".bin")' \
  'if (false && name.starts_with(stem + "-") && name.ends_with(".bin")'
mutant "a shard writer leaves the old index in place while it writes" "-tc=hidden?shards:?mismatched*" \
  'fs::remove(dir / "index.json", ec);' \
  '(void)ec;'
mutant "shard sizes: the expected size wraps around 2^64 unchecked" "-tc=token?shards:?every?damaged*" \
  'if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return UINT64_MAX;' \
  'r = a * b + c;'
mutant "the ranks' recorded programs are not compared" "-tc=ranks?whose?recorded?programs?differ*" \
  'coord_->check_same(program_signature(replicas_[0]->engine(), replicas_[0]->drafter().params()),' \
  'coord_->check_same(std::string(),'
# --- Launcher variables (issue 8) ---
mutant "launch: Slurm's variables win over torchrun's" "-ts=launch" \
  'if (env(name)) return parse_vars(env, kTorchrun);' \
  'if (env(name) && !env("SLURM_PROCID")) return parse_vars(env, kTorchrun);'
mutant "launch: RANK equal to WORLD_SIZE accepted" "-ts=launch" \
  'DF_CHECK(l.rank < l.world,' \
  'DF_CHECK(l.rank <= l.world,'
mutant "launch: LOCAL_RANK equal to LOCAL_WORLD_SIZE accepted" "-ts=launch" \
  'DF_CHECK(l.local_rank < l.local_world,' \
  'DF_CHECK(l.local_rank <= l.local_world,'
mutant "launch: an empty MASTER_ADDR accepted" "-ts=launch" \
  'DF_CHECK(addr && !addr->empty(),' \
  'DF_CHECK(addr.has_value(),'
mutant "launch: the rendezvous on MASTER_PORT itself, not MASTER_PORT + 1" "-ts=launch" \
  'return launch.master_port + 1;' \
  'return launch.master_port;'
mutant "launch: runtime.rendezvous_port ignored" "-ts=launch" \
  'if (configured_port > 0) return int(configured_port);' \
  'if (false) return int(configured_port);'
mutant "launch: the one visible GPU not taken when LOCAL_RANK > 0" "-ts=launch" \
  'if (visible == 1) return 0;' \
  'if (visible == 1 && l.local_rank == 0) return 0;'
mutant "launch: LOCAL_RANK beyond the visible GPUs accepted" "-ts=launch" \
  'DF_CHECK(l.local_rank < visible, who' \
  'DF_CHECK(l.local_rank <= visible, who'
mutant "launch: a runtime.devices list one entry short accepted" "-ts=launch" \
  'DF_CHECK(l.local_rank < int(ids.size()),' \
  'DF_CHECK(l.local_rank <= int(ids.size()),'
mutant "launch: a listed GPU id equal to the count visible accepted" "-ts=launch" \
  'DF_CHECK(id < visible,' \
  'DF_CHECK(id <= visible,'
# --- The rendezvous' wire format (issue 8) ---
mutant "rendezvous wire: a frame taken before its body has arrived" "-ts=rendezvous*" \
  'if (buf.size() < 16 + size_t(len)) return std::nullopt;' \
  'if (buf.size() < 16) return std::nullopt;'
mutant "rendezvous wire: a taken frame's body left in the buffer" "-ts=rendezvous*" \
  'buf.erase(0, 16 + size_t(len));' \
  'buf.erase(0, 16);'
mutant "rendezvous wire: foreign bytes read as a frame" "-ts=rendezvous*" \
  'if (ntohl(h[0]) != kMagic) throw Error("not a dflash rendezvous message");' \
  'if (false) throw Error("not a dflash rendezvous message");'
mutant "rendezvous wire: an oversized length accepted" "-ts=rendezvous*" \
  'if (len > kMaxFrame) throw' \
  'if (false) throw'
mutant "rendezvous wire: a gather result cut short accepted" "-ts=rendezvous*" \
  'DF_CHECK(at + n <= bytes.size(), "rendezvous: a malformed gather result");' \
  'DF_CHECK(true, "rendezvous: a malformed gather result");'
# --- Checkpoint files (audit 2026-12-04) ---
mutant "checkpoint: a tensor of another dtype loaded" "-ts=checkpoint*,bad-input*" \
  'DF_CHECK(t.dtype == "F32", f << ": tensor' \
  'DF_CHECK(true, f << ": tensor'
mutant "checkpoint: a tensor the model lacks accepted" "-ts=checkpoint*,bad-input*" \
  'DF_CHECK(known, f << ": tensor' \
  'DF_CHECK(true, f << ": tensor'
mutant "checkpoint: the moments' step not held to COMPLETE.json's" "-ts=checkpoint*,bad-input*" \
  'DF_CHECK(step == recorded, what' \
  'DF_CHECK(true, what'
mutant "checkpoint: NaN in a checkpoint loaded" "-ts=checkpoint*,bad-input*" \
  '    values.check_all_finite();' \
  '    (void)0;'
mutant "checkpoint: staging folders of dead runs never pruned" "-ts=checkpoint*,bad-input*" \
  'if (staging_pid(p.filename().string()) != long(::getpid())) fs::remove_all(p, ec);' \
  'if (false) fs::remove_all(p, ec);'
# --- Config checks at their edges (audit 2026-12-04) ---
mutant "config: a fraction key's upper end, open or closed, ignored" "-ts=config*" \
  'require(v >= 0 && (closed ? v <= 1 : v < 1), key,' \
  'require(v >= 0 && v <= 1, key,'
mutant "config: synthetic min_length equal to prompt_length accepted" "-ts=config*" \
  'require(sd.min_length > sd.prompt_length,' \
  'require(sd.min_length >= sd.prompt_length,'
mutant "config: synthetic max_length equal to min_length refused" "-ts=config*" \
  'require(sd.max_length >= sd.min_length,' \
  'require(sd.max_length > sd.min_length,'
mutant "config: heads not a multiple of the KV heads accepted" "-ts=config*" \
  'require(st.num_attention_heads % st.num_key_value_heads == 0,' \
  'require(true,'
mutant "config: a repeated target.layer_ids entry accepted" "-ts=config*" \
  'require(ids.insert(id).second,' \
  'require((ids.insert(id), true),'
mutant "config: a layer id equal to the synthetic target's layer count accepted" "-ts=config*" \
  'require(!st.enabled || id < st.num_hidden_layers,' \
  'require(!st.enabled || id <= st.num_hidden_layers,'
mutant "config: a mask token id equal to the vocab size accepted" "-ts=config*" \
  'require(!st.enabled || *dr.mask_token_id < st.vocab_size,' \
  'require(!st.enabled || *dr.mask_token_id <= st.vocab_size,'
mutant "config: arena_gb over memory_limit_gb accepted" "-ts=config*" \
  'c.runtime.arena_gb <= c.runtime.memory_limit_gb' \
  'true'
mutant "config: rendezvous_port 65536 accepted" "-ts=config*" \
  'c.runtime.rendezvous_port <= 65535' \
  'c.runtime.rendezvous_port <= 65536'
mutant "config: stop ids and spec_ignore_eos together accepted" "-ts=config*" \
  'require(c.eval.spec_stop_token_ids.empty() || !c.eval.spec_ignore_eos,' \
  'require(true,'
mutant "config: a stop id over INT32_MAX accepted" "-ts=config*" \
  'require(id >= 0 && id <= INT32_MAX, "eval.spec_stop_token_ids",' \
  'require(id >= 0, "eval.spec_stop_token_ids",'
# --- Export for SGLang (audit 2026-12-04) ---
mutant "export: num_key_value_heads written as the attention heads" "-ts=checkpoint-io" \
  'c["num_key_value_heads"] = s.num_key_value_heads;' \
  'c["num_key_value_heads"] = s.num_attention_heads;'
mutant "export: tie_word_embeddings written true" "-ts=checkpoint-io" \
  'c["tie_word_embeddings"] = false;' \
  'c["tie_word_embeddings"] = true;'
mutant "export: dflash_config without the target's layer ids" "-ts=checkpoint-io" \
  '{"target_layer_ids", s.target_layer_ids}' \
  '{"target_layer_ids", json::array()}'
mutant "export: torch_dtype always bfloat16" "-ts=checkpoint-io,export" \
  'const char* dtype_text = dtype == DType::bf16 ? "bfloat16" : "float32";' \
  'const char* dtype_text = "bfloat16";'
mutant "export: max_position_embeddings left out" "-ts=checkpoint-io" \
  'c["max_position_embeddings"] = s.max_position_embeddings;' \
  '(void)0;'
mutant "export: rope_theta written as the default 1e6" "-ts=checkpoint-io" \
  'c["rope_theta"] = s.rope_theta;' \
  'c["rope_theta"] = 1000000.0;'
# --- Mutants 142 on: scripts/mutants-list-files.sh ---
source "$(dirname "${BASH_SOURCE[0]}")/mutants-list-files.sh"
