# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh after mutants-list-ops.sh):
# the model's speculative-decoding ops, the data shards, the trainer's cluster and bucket step, tensors.
# --- Startup report ---
mutant "startup report: exactly 1024 bytes shown as 1024 B, not 1.00 KiB" "-ts=model-wiring,config-effects,trainer" \
  'while (v >= 1024 && u < 4) {' \
  'while (v > 1024 && u < 4) {'
mutant "startup report: the recompute column counts partial segments twice" "-ts=model-wiring,config-effects,trainer" \
  'const std::string whole = std::to_string(p.recomputed - p.partially_recomputed), of = "/" + std::to_string(p.segments);' \
  'const std::string whole = std::to_string(p.recomputed), of = "/" + std::to_string(p.segments);'
mutant "startup.json: partially_recomputed_segments holds the recomputed count" "-ts=model-wiring,config-effects,trainer,profile" \
  '{"partially_recomputed_segments", p.partially_recomputed},' \
  '{"partially_recomputed_segments", p.recomputed},'
mutant "startup.json: buckets lists the programs that are not training steps" "-ts=config-effects,trainer" \
  'if (p.name.rfind("train/", 0) == 0) j["buckets"].push_back(e);' \
  'if (p.name.rfind("train/", 0) != 0) j["buckets"].push_back(e);'
# --- Hidden-state and token shards ---
mutant "hidden shards: a rank's part numbers its sequences from 0, not its first sequence" "-ts=data,model-wiring" \
  'const uint64_t n = lengths_.size(), first = uint64_t(total_) - n + uint64_t(part_ ? part_->first_sequence : 0);' \
  'const uint64_t n = lengths_.size(), first = uint64_t(total_) - n;'
mutant "hidden index: ranks' parts that do not follow each other accepted" "-ts=data,model-wiring" \
  'DF_CHECK(e.at("first_sequence").get<int64_t>() == total,' \
  'DF_CHECK(true,'
mutant "hidden rows: an overlong sequence under truncate gets no rows, under skip all" "-ts=data" \
  'rows[i] = lengths[i] <= max_seq ? lengths[i] : overflow == OverflowPolicy::skip ? 0 : max_seq;' \
  'rows[i] = lengths[i] <= max_seq ? lengths[i] : overflow == OverflowPolicy::skip ? max_seq : 0;'
mutant "hidden shards: a bf16 NaN/Inf missed by the fast all-finite pass" "-ts=data" \
  'for (uint64_t i = 0; i < count; ++i) any |= (load<uint16_t>(data, 2 * i) & 0x7f80u) == 0x7f80u;' \
  'for (uint64_t i = 0; i < count; ++i) any |= (load<uint16_t>(data, 2 * i) & 0x7f80u) == 0x7f00u;'
mutant "hidden batch: padding rows keep the buffer's old values" "-ts=data" \
  'std::fill(out.begin(), out.end(), 0.0f);' \
  '(void)0;'
mutant "token shards: an empty sequence in the offsets table accepted" "-ts=data" \
  'DF_CHECK(cur > prev && cur <= t, f << ": offsets[" << k << "] is " << cur << ", expected greater than offsets["' \
  'DF_CHECK(cur >= prev && cur <= t, f << ": offsets[" << k << "] is " << cur << ", expected greater than offsets["'
mutant "token shards: first_sequence written as the shard's number" "-ts=data" \
  'store<uint64_t>(head, 40, first);' \
  'store<uint64_t>(head, 40, first / size_t(sequences_per_shard));'
# --- Tensors ---
mutant "tensor: u8 host values read as signed bytes" "-ts=tensor,safetensors,export" \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = tmp[i];' \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = int8_t(tmp[i]);'
mutant "tensor: a bf16 scalar's item() refused" "-ts=tensor,model-wiring" \
  'return dtype() == DType::f32 || dtype() == DType::bf16 ? to_floats()[0] : float(to_ints()[0]);' \
  'return dtype() == DType::f32 ? to_floats()[0] : float(to_ints()[0]);'
mutant "tensor: turning requires_grad off keeps the old gradient" "-ts=tensor,model-wiring" \
  't.grad.reset();' \
  '(void)0;'
# --- CPU DFlash attention ---
mutant "dflash attention: a partial last context tile dropped" "-ts=attention" \
  'context_tiles = (anchor + key_tile - 1) / key_tile;' \
  'context_tiles = anchor / key_tile;'
mutant "dflash attention: an anchor past S clamped to S - 1" "-ts=attention" \
  'anchor = raw < 0 ? 0 : (raw > d.S ? d.S : raw);' \
  'anchor = raw < 0 ? 0 : (raw > d.S ? d.S - 1 : raw);'
mutant "dflash attention: dropped blocks counted in the visited tiles" "-ts=attention,profile" \
  'if (kept) visited += vis.count();' \
  'visited += vis.count();'
mutant "dflash attention backward: dk skipped when dq is not wanted" "-ts=attention" \
  'if (!dq && !dk) continue;' \
  'if (!dq || !dk) continue;'
# --- Decode ops, spec ops, drafter decoder, dflash ops, bucket step ---
mutant "decode ops: a device scalar of several elements accepted" "-ts=spec,model-wiring" \
  'DF_CHECK(t.numel() == 1, op << ": " << role << " is " << t.describe() << " but must hold one i32 (shape [1])");' \
  'DF_CHECK(t.numel() >= 1, op << ": " << role << " is " << t.describe() << " but must hold one i32 (shape [1])");'
mutant "cached attention: a scale of 0 accepted" "-ts=spec,model-wiring" \
  'DF_CHECK(std::isfinite(scale) && scale > 0.0f, kOp' \
  'DF_CHECK(std::isfinite(scale) && scale >= 0.0f, kOp'
mutant "drafter decode: the rope frequencies with exponent i/hd, not 2i/hd" "-ts=spec" \
  'for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = float(1.0 / std::pow(s.rope_theta, double(2 * i) / double(s.head_dim)));' \
  'for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = float(1.0 / std::pow(s.rope_theta, double(i) / double(s.head_dim)));'
mutant "dflash_prepare: the noise blocks masked with token 0, not mask_token_id" "-ts=drafter" \
  'return {input_ids.dim(0), input_ids.dim(1), anchors.dim(1), bs, int32_t(mask), float(gamma)};' \
  'return {input_ids.dim(0), input_ids.dim(1), anchors.dim(1), bs, int32_t(0), float(gamma)};'
mutant "bucket step: the partial-recompute cost counts anchors, not draft rows" "-ts=model-wiring,checkpoint" \
  'return dflash::partial_recompute_cost(drafter_.spec(), bucket_.seq, bucket_.anchors * drafter_.spec().block_size);' \
  'return dflash::partial_recompute_cost(drafter_.spec(), bucket_.seq, bucket_.anchors);'
mutant "spec prefill commit: the margin and the top logit swapped" "-ts=model-wiring,spec" \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_prefill_commit(ps, pa, pm, pt, pr); });' \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_prefill_commit(ps, pa, pt, pm, pr); });'
mutant "spec step commit: the margin and the top logit swapped" "-ts=model-wiring,spec" \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_step_commit(ps, pa, pm, pt, pr); });' \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_step_commit(ps, pa, pt, pm, pr); });'
mutant "copy_rows: dst and src rows of different sizes accepted" "-ts=model-wiring,spec" \
  'DF_CHECK(src_rows > 0 && row_bytes == src.nbytes() / size_t(src_rows),' \
  'DF_CHECK(src_rows > 0,'
