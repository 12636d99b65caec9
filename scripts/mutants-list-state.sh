# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh): the state files that earlier mutants
# touched least for their size (checkpoints, matmul, the optimizer, the CPU communicator, hf config, replica, spec decoding).

# --- Sharded and plain checkpoints ---
mutant "sharded checkpoint: every shard's begin written as rank 0's (the manifest's ranges overlap)" "-ts=state-wiring -tc=sharded?checkpoint*" \
  '{"begin", int64_t(r) * params.shard_numel()},' \
  '{"begin", params.shard_begin()},'
mutant "sharded checkpoint: a rank whose optimizer is at another step saved under this step" "-ts=state-wiring -tc=sharded?checkpoint*" \
  'DF_CHECK(counter == step, "rank " << s.rank << " has done " << counter << " optimizer steps, not " << step);' \
  'DF_CHECK(counter >= step, "rank " << s.rank << " has done " << counter << " optimizer steps, not " << step);'
mutant "sharded checkpoint: a save missing a rank's shard completed (the shard count not checked)" "-ts=state-wiring -tc=sharded?checkpoint*" \
  'DF_CHECK(int64_t(files.size()) == world, "expected " << world << " shard files, got " << files.size());' \
  'DF_CHECK(int64_t(files.size()) <= world, "expected " << world << " shard files, got " << files.size());'
mutant "checkpoint marker: a file grown after the save accepted when checksums are skipped" "-ts=state-wiring -tc=checkpoint?marker*" \
  '    if (bytes != want)' \
  '    if (bytes < want)'
mutant "checkpoint load: the v moments not held to the model's names and shapes" "-ts=state-wiring -tc=checkpoint?load*" \
  'check_tensors(moments, params, {"m.", "v."}, {"step"}, what);' \
  'check_tensors(moments, params, {"m."}, {"step"}, what);'
mutant "checkpoint save: a drafter spec of other shapes (same names) accepted for the store" "-ts=state-wiring -tc=checkpoint?save*" \
  'same = specs[i].name == params.specs()[i].name && specs[i].shape == params.specs()[i].shape;' \
  'same = specs[i].name == params.specs()[i].name;'

# --- Speculative decoding ---
mutant "spec decoder: set_position refuses a block that ends exactly at the capacity" "-ts=state-wiring -tc=spec?decoder*" \
  'DF_CHECK(position >= 1 && position + block_size() <= opt_.max_len,' \
  'DF_CHECK(position >= 1 && position + block_size() < opt_.max_len,'
mutant "spec decoder: a short prefill chunk commits the argmax of the chunk's last slot, not its last real row" "-ts=spec" \
  'ctl = {int32_t(c), int32_t(c - 1)};' \
  'ctl = {int32_t(c), int32_t(P - 1)};'
mutant "check_decode_prompt: max_new_tokens 0 accepted (a decode that generates nothing)" "-ts=state-wiring -tc=spec?decoder*" \
  'DF_CHECK(max_new >= 1, where << ": max_new_tokens is " << max_new << "; it must be >= 1");' \
  'DF_CHECK(max_new >= 0, where << ": max_new_tokens is " << max_new << "; it must be >= 1");'

# --- matmul backward ---
mutant "matmul backward: dB overwritten even when b already holds a gradient" "-ts=ops,autograd" \
  'const float beta = db_fresh ? 0.0f : 1.0f;' \
  'const float beta = 0.0f;'
mutant "linear_concat_rows backward: every batch row overwrites a fresh dW (only the last row kept)" "-ts=ops,autograd" \
  'r == 0 && dw_fresh ? 0.0f : 1.0f' \
  'dw_fresh ? 0.0f : 1.0f'

# --- Parameter store and optimizer ---
mutant "parameter store: a sharded rank's part of a straddling parameter taken from the parameter's start" "-ts=state-wiring -tc=sharded?checkpoint*" \
  'part.copy_from_host(values + (begin - off), size_t(end - begin) * sizeof(float));' \
  'part.copy_from_host(values, size_t(end - begin) * sizeof(float));'
mutant "parameter store: the flat size padded to the alignment only, not to world equal aligned slices" "-ts=state-wiring -tc=parameter?store*" \
  'const int64_t unit = align * layout.world;' \
  'const int64_t unit = align;'

# --- CPU communicator ---
mutant "thread communicator: a later rank's registration redefines the size (mismatched models accepted)" "-ts=state-wiring -tc=thread?communicator*" \
  'if (n_ == 0 && n > 0) {' \
  'if (n > 0) {'
mutant "communicator: an all_reduce over fewer floats than registered accepted" "-ts=state-wiring -tc=thread?communicator*" \
  'DF_CHECK(buffers[size_t(rank)] == data && n == want,' \
  'DF_CHECK(buffers[size_t(rank)] == data,'
mutant "reduce_scatter_: a buffer that does not split into equal slices accepted" "-ts=state-wiring -tc=thread?communicator*" \
  'DF_CHECK(flat.numel() % world == 0, "reduce_scatter: " << flat.describe() << " does not split into " << world' \
  'DF_CHECK(flat.numel() >= world, "reduce_scatter: " << flat.describe() << " does not split into " << world'

# --- Hugging Face config ---
mutant "target config: DeepSeek's n_routed_experts not read as a mixture of experts" "-ts=state-wiring -tc=target?config*" \
  'for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})' \
  'for (const char* key : {"num_experts", "num_local_experts"})'
mutant "target config: a top-level rope_theta wins over rope_parameters.rope_theta" "-ts=state-wiring -tc=target?config*" \
  'if (rope && r.find(*rope, "rope_theta")) {' \
  'if (rope && r.find(*rope, "rope_theta") && !r.find(j, "rope_theta")) {'
mutant "target config: a class name given as model_type accepted" "-ts=state-wiring -tc=target?config*" \
  'if (name == "qwen3" || (!model_type && name == "Qwen3ForCausalLM")) arch = TargetArch::qwen3;' \
  'if (name == "qwen3" || name == "Qwen3ForCausalLM") arch = TargetArch::qwen3;'

# --- Replica and recompute checkpointing ---
mutant "replica: the update scales gradients as if each step had one micro-batch" "-ts=trainer-reference" \
  'u.micro_batches = int(o.grad_accum);' \
  'u.micro_batches = 1;'
mutant "replica: the bucket steps write fresh gradients even with several micro-batches" "-ts=trainer-reference" \
  'steps_.back()->set_fresh_grads(fresh_grads);' \
  'steps_.back()->set_fresh_grads(o.train);'
mutant "checkpoint stash: a take() past the last put() not refused" "-ts=checkpoint -tc=*takes?fewer?or?more*" \
  'DF_CHECK(active_ && replaying_ && next_ < kept_.size(),' \
  'DF_CHECK(active_ && replaying_ && next_ <= kept_.size(),'
mutant "checkpoint stash: kept values adopted at their storage's start, not their view's offset" "-ts=state-wiring -tc=checkpoint?stash*" \
  'skipped.impl().offset = kept.impl().offset;' \
  'skipped.impl().offset = 0;'
