# The CPU mutants of scripts/mutants.sh (sourced by it; see mutant() there), ordered by the source file each
# one changes, so that consecutive mutants rebuild one translation unit. Each snippet (OLD) must occur exactly
# once in the sources outside tests/, scripts/ and docs/; a mutant follows its snippet when code moves (move it
# under its new file's heading when you touch it). Config keys: docs/TESTING.md, "Config keys and their mutants".
# --- apps/dflash_train.cpp ---
mutant "CLI: --flag=value keeps the '='" "-ts=bad-input" \
  'if (s.rfind(f + "=", 0) == 0) v = s.substr(f.size() + 1);' \
  'if (s.rfind(f + "=", 0) == 0) v = s.substr(f.size());'
mutant "CLI: --max-new-tokens 0 accepted" "-ts=bad-input,spec" \
  'if (used != text.size() || v < 1) usage_error("--max-new-tokens "' \
  'if (used != text.size() || v < 0) usage_error("--max-new-tokens "'
mutant "CLI: an empty flag value taken as not given" "-ts=bad-input -tc=*max-new-tokens*" \
  'if (v.empty()) usage_error(' \
  'if (false) usage_error('
mutant "export: --overwrite not passed on by the command line" "-ts=exit-codes -tc=*SIGTERM*" \
  'run_export(a.checkpoint, a.out, a.dtype, a.overwrite);' \
  'run_export(a.checkpoint, a.out, a.dtype, false);'
mutant "exit status: a stop by SIGTERM exits 0" "-ts=exit-codes -tc=*SIGTERM*" \
  'else if (run_training(cfg).interrupted) return kStoppedStatus;' \
  'else run_training(cfg);'
# --- data/anchors.cpp ---
mutant "anchor bound p < len - bs, not p <= len - bs" "-ts=data" \
  'for (int64_t p = 0; p <= s.length() - block_size; ++p)' \
  'for (int64_t p = 0; p < s.length() - block_size; ++p)'
mutant "training anchors of a truncated sequence drawn from S - 1 tokens" "-tc=*fill_batch:?layout*" \
  'anchors.push_back(s.length() > bucket.seq ? sample_anchors(truncate_sequence(s, bucket.seq), bucket.anchors, block_size, rng)' \
  'anchors.push_back(s.length() > bucket.seq ? sample_anchors(truncate_sequence(s, bucket.seq - 1), bucket.anchors, block_size, rng)'
mutant "fill_batch: a truncated sequence counts its untruncated length" "-ts=data" \
  'real_tokens += len;' \
  'real_tokens += s.length();'
# --- data/data.cpp ---
mutant "an epoch's partial groups flushed in reverse bucket order" "-tc=*partial?groups?last*" \
  'for (size_t b = 0; b < pending_.size(); ++b)' \
  'for (size_t b = pending_.size(); b-- > 0;)'
mutant "planner: a truncated sequence without an anchor still counted as truncated" "-ts=bad-input-data" \
  'if (lengths_[i] > max_seq) --truncated_;' \
  '(void)0;'
mutant "data planner: the shuffle never leaves a sequence in place (Sattolo, not Fisher-Yates)" "-ts=data -tc=planner*" \
  'std::swap(p[i - 1], p[size_t(uniform_below(rng, i))]);' \
  'std::swap(p[i - 1], p[size_t(uniform_below(rng, i - 1))]);'
mutant "data planner: a saved pending group as large as its batch accepted" "-ts=data -tc=planner*" \
  'sane = int64_t(s.pending[b].size()) < buckets_[b].batch;' \
  'sane = int64_t(s.pending[b].size()) <= buckets_[b].batch;'
mutant "data planner: the last bucket never taken as the largest (truncation into a smaller one)" "-ts=data -tc=planner*" \
  'for (size_t b = 1; b < buckets_.size(); ++b)' \
  'for (size_t b = 1; b + 1 < buckets_.size(); ++b)'
# --- data/data.h ---
mutant "micro-batch: the anchor seed takes the index before the epoch" "-ts=data -tc=splitmix64*" \
  'uint64_t anchor_seed(uint64_t base) const { return derive_seed(base, uint64_t(epoch), uint64_t(index)); }' \
  'uint64_t anchor_seed(uint64_t base) const { return derive_seed(base, uint64_t(index), uint64_t(epoch)); }'
# --- data/hidden_shards.cpp ---
mutant "hidden rows: a sequence as long as the largest bucket dropped under skip" "-tc=*hidden?shards:?f32*" \
  'rows[i] = lengths[i] <= max_seq ? lengths[i]' \
  'rows[i] = lengths[i] < max_seq ? lengths[i]'
mutant "hidden shards: a rank's part numbers its sequences from 0, not its first sequence" "-ts=data" \
  'const uint64_t n = lengths_.size(), first = uint64_t(total_) - n + uint64_t(part_ ? part_->first_sequence : 0);' \
  'const uint64_t n = lengths_.size(), first = uint64_t(total_) - n;'
mutant "hidden index: ranks' parts that do not follow each other accepted" "-ts=data" \
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
# --- data/screen.cpp ---
mutant "screen: the first sequence with the mask token reported as the last" "-ts=bad-input-data" \
  'if (r.first_mask_sequence < 0) r.first_mask_sequence = i;' \
  'r.first_mask_sequence = i;'
mutant "screen: a sequence of exactly the block size counted as shorter" "-ts=bad-input-data" \
  'if (staged < block_size) ++r.shorter_than_block;' \
  'if (staged <= block_size) ++r.shorter_than_block;'
# --- data/shard_files.cpp ---
mutant "shard writers keep an earlier run's stale shards" "-tc=*stale?shards?removed*" \
  'if (name.starts_with(stem + "-") && name.ends_with(".bin")' \
  'if (false && name.starts_with(stem + "-") && name.ends_with(".bin")'
mutant "a shard writer leaves the old index in place while it writes" "-tc=hidden?shards:?mismatched*" \
  'fs::remove(dir / "index.json", ec);' \
  '(void)ec;'
mutant "shard sizes: the expected size wraps around 2^64 unchecked" "-tc=token?shards:?every?damaged*" \
  'if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return UINT64_MAX;' \
  'r = a * b + c;'
# --- data/shards.cpp ---
mutant "token shards: a loss_mask byte other than 0 or 1 read as is" "-tc=*token?shards:?every?damaged*" \
  'bad |= uint32_t(seq.input_ids[j]) >= uint64_t(vocab_size_) || seq.loss_mask[j] > 1;' \
  'bad |= uint32_t(seq.input_ids[j]) >= uint64_t(vocab_size_);'
mutant "token shards: an empty sequence in the offsets table accepted" "-ts=data" \
  'DF_CHECK(cur > prev && cur <= t, f << ": offsets[" << k << "] is " << cur << ", expected greater than offsets["' \
  'DF_CHECK(cur >= prev && cur <= t, f << ": offsets[" << k << "] is " << cur << ", expected greater than offsets["'
mutant "token shards: first_sequence written as the shard's number" "-ts=data" \
  'store<uint64_t>(head, 40, first);' \
  'store<uint64_t>(head, 40, first / size_t(sequences_per_shard));'
# --- data/shards.h ---
mutant "token shards: written and expected as version 2" "-ts=data,bad-input-files" \
  'constexpr uint32_t kTokenShardVersion = 1;' \
  'constexpr uint32_t kTokenShardVersion = 2;'
# --- data/synthetic.cpp ---
mutant "data.synthetic.temperature ignored (always greedy)" "-ts=config-effects" \
  'if (c.temperature <= 0) {' \
  'if (true) {'
mutant "synthetic: greedy generation may emit the mask token" "-ts=data,config-effects" \
  'if (v != mask_token_id && row[v] > best) best = row[v], next = int32_t(v);' \
  'if (row[v] > best) best = row[v], next = int32_t(v);'
mutant "synthetic: the prompt's last token trained on" "-ts=trainer" \
  'for (int64_t i = 0; i < c.prompt_length; ++i) s.loss_mask[size_t(i)] = 0;' \
  'for (int64_t i = 0; i + 1 < c.prompt_length; ++i) s.loss_mask[size_t(i)] = 0;'
# --- dist/comm.cpp ---
mutant "reduce_scatter: every rank reduces the first slice" "-ts=ranks" \
  'const int64_t at = int64_t(rank) * count;' \
  'const int64_t at = 0;'
mutant "thread all_reduce: slices rounded down leave the tail unreduced" "-ts=concurrency" \
  'int64_t per = (n_ + world_ - 1) / world_;' \
  'int64_t per = n_ / world_;'
mutant "reduce_scatter_: every rank's sum written into the first slice" "-ts=ranks" \
  'float* recv = p + int64_t(rank) * count;' \
  'float* recv = p;'
mutant "thread communicator: a later rank's registration redefines the size (mismatched models accepted)" "-ts=concurrency -tc=thread?communicator*" \
  'if (n_ == 0 && n > 0) {' \
  'if (n > 0) {'
mutant "communicator: an all_reduce over fewer floats than registered accepted" "-ts=concurrency -tc=thread?communicator*" \
  'DF_CHECK(buffers[size_t(rank)] == data && n == want,' \
  'DF_CHECK(buffers[size_t(rank)] == data,'
mutant "reduce_scatter_: a buffer that does not split into equal slices accepted" "-ts=concurrency -tc=thread?communicator*" \
  'DF_CHECK(flat.numel() % world == 0, "reduce_scatter: " << flat.describe() << " does not split into " << world' \
  'DF_CHECK(flat.numel() >= world, "reduce_scatter: " << flat.describe() << " does not split into " << world'
# --- dist/coordinator.cpp ---
mutant "check_same: rank 1 never compared with rank 0" "-ts=ranks" \
  'for (size_t r = 1; r < all.size(); ++r)' \
  'for (size_t r = 2; r < all.size(); ++r)'
mutant "thread coordinator: a later failure replaces the first" "-ts=concurrency" \
  'if (!s_.failure_) s_.failure_ = "rank "' \
  's_.failure_ = "rank "'
# --- dist/launch.cpp ---
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
# --- dist/launch.h ---
mutant "launch: a world of one counts as distributed" "-ts=launch" \
  'bool distributed() const { return world > 1; }' \
  'bool distributed() const { return world >= 1; }'
# --- dist/optimizer_distributed.cpp ---
mutant "gradients not all-reduced across workers" "-ts=trainer-reference" \
  'else all_reduce_(comm, params_.flat_grads(), rank);' \
  'else (void)rank;'
mutant "adamw over ranks: the gradient scale applied from the start of the buffer, not this rank's slice" "-ts=ranks -tc=sharded*" \
  'x.launch([=] { kernels::cpu::scale_inplace(g + at, len, grad_scale); });' \
  'x.launch([=] { kernels::cpu::scale_inplace(g, len, grad_scale); });'
# --- dist/rendezvous.cpp ---
mutant "rendezvous: a joiner that reports another world size accepted" "-ts=rendezvous*" \
  'if (world != o.world) {' \
  'if (false) {'
mutant "rendezvous: the timeout names the ranks that arrived, not the missing ones" "-ts=rendezvous*" \
  'if (!by_rank[size_t(k)]) missing +=' \
  'if (by_rank[size_t(k)]) missing +='
mutant "rendezvous: port 65536 accepted (wraps to 0, an ephemeral port)" "-ts=rendezvous -tc=rendezvous*" \
  'DF_CHECK(o.port >= 1 && o.port <= 65535, "rendezvous: port "' \
  'DF_CHECK(o.port >= 1 && o.port <= 65536, "rendezvous: port "'
mutant "rendezvous: a rank equal to the world size accepted" "-ts=rendezvous -tc=rendezvous*" \
  'DF_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world,' \
  'DF_CHECK(o.world >= 1 && o.rank >= 0 && o.rank <= o.world,'
mutant "rendezvous: a failed join arms the exit timer, ending a process that caught its error" "-ts=rendezvous?failure -tc=a?join?that?times?out*" \
  'if (joined_ && !clean) report_failure' \
  'if (!clean) report_failure'
# --- dist/rendezvous_watch.cpp ---
mutant "an abort hook installed after the watchdog saw a failure never runs" "-ts=rendezvous" \
  'abort_if_wanted();  // a hook installed after the failure was seen' \
  '(void)0;  // a hook installed after the failure was seen'
mutant "rendezvous watch: a later failure replaces the first one recorded" "-ts=rendezvous -tc=rendezvous*" \
  'if (s.failure) return false;' \
  'if (false) return false;'
mutant "rendezvous watch: this rank's own failure after finish() dropped" "-ts=rendezvous -tc=rendezvous*" \
  'if (print && s.finished) return false;' \
  'if (s.finished) return false;'
# --- dist/rendezvous_wire.cpp ---
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
# --- dist/rendezvous_wire.h ---
mutant "rendezvous: the error line counts as printed from the start, so a failing rank prints none" "-ts=rendezvous?failure" \
  'std::shared_ptr<std::atomic<bool>> printed = std::make_shared<std::atomic<bool>>(false);' \
  'std::shared_ptr<std::atomic<bool>> printed = std::make_shared<std::atomic<bool>>(true);'
# --- graphs/buckets.cpp ---
mutant "smallest_bucket_for: the largest bucket that holds it" "-ts=buckets" \
  'buckets[i].seq < buckets[size_t(best)].seq' \
  'buckets[i].seq > buckets[size_t(best)].seq'
# --- graphs/checkpoint.cpp ---
mutant "checkpoint: the recomputation runs with grad mode as the backward left it (off)" "-ts=checkpoint" \
  'explicit NestedTape(Context& ctx) : ctx_(ctx), outer_(ctx.swap_tape(&tape_)), grad_(ctx.grad_enabled()) {' \
  'explicit NestedTape(Context& ctx) : ctx_(ctx), outer_(ctx.swap_tape(&tape_)), grad_(ctx.grad_enabled()) { return;'
mutant "checkpoint: a recomputation that takes fewer kept results accepted" "-ts=checkpoint" \
  'DF_CHECK(stash->next_ == stash->kept_.size(),' \
  'DF_CHECK(true,'
mutant "checkpoint stash: a take() past the last put() not refused" "-ts=checkpoint -tc=*takes?fewer?or?more*" \
  'DF_CHECK(active_ && replaying_ && next_ < kept_.size(),' \
  'DF_CHECK(active_ && replaying_ && next_ <= kept_.size(),'
mutant "checkpoint stash: kept values adopted at their storage's start, not their view's offset" "-ts=checkpoint -tc=checkpoint?stash*" \
  'skipped.impl().offset = kept.impl().offset;' \
  'skipped.impl().offset = 0;'
# --- graphs/engine.cpp ---
mutant "recording-differs-from-plan check removed" "-ts=seal" \
  'DF_CHECK(p.arena_bytes() == reports_[i].arena_bytes && p.kernels() == reports_[i].kernels,' \
  'DF_CHECK(true,'
mutant "an arena budget does not lower the recomputation" "-ts=seal" \
  'const size_t target = std::max(largest, arena_budget_);' \
  'const size_t target = largest;'
mutant "recompute ladder: deep bodies still offered partial recomputation" "-ts=checkpoint" \
  'if (segments > kMaxPartialSegments) partial = false;' \
  'if (false) partial = false;'
mutant "available memory: /proc/meminfo's kB read as bytes" "-ts=seal" \
  'if (key == "MemAvailable:") return kb * 1024;' \
  'if (key == "MemAvailable:") return kb;'
# --- graphs/engine.h ---
mutant "engine: partial recomputation offered to bodies of 13 segments" "-ts=checkpoint -tc=the?recompute?ladder*" \
  'constexpr int64_t kMaxPartialSegments = 12;' \
  'constexpr int64_t kMaxPartialSegments = 13;'
# --- graphs/overlap.cpp ---
mutant "layer 0's attention half is reduced as a bucket before its backward ends" "-tc=*overlap's?buckets*" \
  'if (layers > 0) plan.attention[0] = {0, 0};' \
  '(void)0;'
mutant "reduction plan: the gradients after the last bucket left out of the rest" "-ts=autograd" \
  'if (at < params.padded_numel()) plan.rest.push_back' \
  'if (false) plan.rest.push_back'
mutant "overlap: a parameter's layer read from the first digit only (layers.12 is layer 1)" "-ts=autograd -tc=overlap*" \
  'return {std::stoll(name.substr(7, dot - 7)), mlp ? LayerGrads::mlp : LayerGrads::all};' \
  'return {std::stoll(name.substr(7, 1)), mlp ? LayerGrads::mlp : LayerGrads::all};'
mutant "overlap: post_attention_layernorm put in the attention half" "-ts=autograd -tc=*overlap*" \
  'const bool mlp = rest.rfind("mlp.", 0) == 0 || rest.rfind("post_attention_layernorm.", 0) == 0;' \
  'const bool mlp = rest.rfind("mlp.", 0) == 0;'
# --- graphs/program.cpp ---
mutant "program: a body that leaves nodes on the tape recorded" "-ts=seal" \
  'DF_CHECK(ctx.tape().size() == 0,' \
  'DF_CHECK(true,'
mutant "program: a body that throws leaves the context recording" "-ts=seal" \
  'ctx.abort_recording();' \
  '(void)0;'
# --- graphs/program.h ---
mutant "plan: the arena needed ignores the offline placement" "-ts=replay,checkpoint" \
  'size_t needed_bytes() const { return placement ? placement->arena_bytes : arena_bytes; }' \
  'size_t needed_bytes() const { return arena_bytes; }'
# --- graphs/startup_report.cpp ---
mutant "the recompute hint ignores runtime.memory_limit_gb" "-ts=config-effects" \
  'if (arena_limit_bytes > 0 && without > arena_limit_bytes) return "";' \
  'if (false) return "";'
mutant "startup report: exactly 1024 bytes shown as 1024 B, not 1.00 KiB" "-ts=startup-report,config-effects,trainer" \
  'while (v >= 1024 && u < 4) {' \
  'while (v > 1024 && u < 4) {'
mutant "startup report: the recompute column counts partial segments twice" "-ts=startup-report,config-effects,trainer" \
  'const std::string whole = std::to_string(p.recomputed - p.partially_recomputed), of = "/" + std::to_string(p.segments);' \
  'const std::string whole = std::to_string(p.recomputed), of = "/" + std::to_string(p.segments);'
mutant "startup.json: partially_recomputed_segments holds the recomputed count" "-ts=startup-report,config-effects,trainer,profile" \
  '{"partially_recomputed_segments", p.partially_recomputed},' \
  '{"partially_recomputed_segments", p.recomputed},'
mutant "startup.json: buckets lists the programs that are not training steps" "-ts=config-effects,trainer" \
  'if (p.name.rfind("train/", 0) == 0) j["buckets"].push_back(e);' \
  'if (p.name.rfind("train/", 0) != 0) j["buckets"].push_back(e);'
# --- graphs/static_io.cpp ---
mutant "static io: stage_out copies the host results onto the device" "-ts=replay" \
  'for (const Slot& s : outputs_) ops::copy_(s.host, s.device);' \
  'for (const Slot& s : outputs_) ops::copy_(s.device, s.host);'
# --- graphs/update.cpp ---
mutant "applied gradient scaled by 1/k, not 1/(k*W)" "-ts=trainer-reference" \
  'grad_scale_ = 1.0f / float(o.micro_batches * world_);' \
  'grad_scale_ = 1.0f / float(o.micro_batches);'
mutant "applied gradient scaled by 1/W, not 1/(k*W)" "-ts=trainer-reference" \
  'grad_scale_ = 1.0f / float(o.micro_batches * world_);' \
  'grad_scale_ = 1.0f / float(world_);'
# --- graphs/worker.cpp ---
mutant "worker thread: a job's exception swallowed" "-ts=concurrency" \
  'error_ = std::current_exception();' \
  '(void)0;'
mutant "worker thread: a job's exception thrown again at every later wait" "-ts=concurrency" \
  'error_ = nullptr;' \
  '(void)0;'
# --- kernels/cpu/attention.cpp ---
mutant "mask: the anchor itself visible as context" "-ts=attention" \
  'anchor = raw < 0 ? 0 : (raw > d.S ? d.S : raw);' \
  'anchor = raw < 0 ? 0 : (raw >= d.S ? d.S : raw + 1);'
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
# --- kernels/cpu/causal_attention.cpp ---
mutant "causal attention: earlier tiles' output not rescaled by a new max" "-tc=*causal_attention*dense*" \
  'if (kt > 0 && correction != 1.0f) scale_row(' \
  'if (false && correction != 1.0f) scale_row('
mutant "causal attention: query heads map to kv heads round-robin" "-tc=*causal_attention*dense*" \
  'const int64_t kv0 = (b * d.S * d.nkv + h / group) * hd;' \
  'const int64_t kv0 = (b * d.S * d.nkv + h % d.nkv) * hd;'
# --- kernels/cpu/concat.cpp ---
mutant "concat kernel: b's rows read at a's width" "-ts=ops -tc=concat?forward*" \
  'if (b_inner) std::memcpy(py + a_inner, pb + size_t(o) * b_inner, b_inner);' \
  'if (b_inner) std::memcpy(py + a_inner, pb + size_t(o) * a_inner, b_inner);'
mutant "concat backward kernel: b's gradient overwritten, not added to" "-ts=ops -tc=concat*" \
  'for (int64_t j = 0; j < b_inner; ++j) db[o * b_inner + j] += row[a_inner + j];' \
  'for (int64_t j = 0; j < b_inner; ++j) db[o * b_inner + j] = row[a_inner + j];'
mutant "split kernel: every part takes the row's first columns" "-ts=ops -tc=split_columns*" \
  'at += inner[i];' \
  'at += 0 * inner[i];'
# --- kernels/cpu/decode.cpp ---
mutant "cached attention: the running sum not rescaled by a new max" "-ts=spec" \
  'row_sum *= correction;' \
  '(void)row_sum;'
mutant "argmax_rows: the margin taken against the best itself" "-ts=spec" \
  'if (j != best && row[j] > second) second = row[j];' \
  'if (row[j] > second) second = row[j];'
mutant "copy_rows: the source offset ignored" "-ts=spec" \
  'const int64_t di = d0 + r, si = s0 + r;' \
  'const int64_t di = d0 + r, si = r;'
# --- kernels/cpu/dflash_batch.cpp ---
mutant "loss decay exponent k, not k-1" "-ts=drafter" \
  'lw[slot] = d.gamma > 0 ? wk * std::exp(-float(k - 1) / d.gamma) : wk;' \
  'lw[slot] = d.gamma > 0 ? wk * std::exp(-float(k) / d.gamma) : wk;'
mutant "tau run does not stop at the first miss" "-ts=drafter" \
  'if (hit) hits += 1;' \
  'if (hit) hits += 1; if (hit && k > 0 && !run) ++accepted;'
# --- kernels/cpu/elementwise.cpp ---
mutant "mul backward kernel: b's gradient is dy * b, not dy * a" "-ts=ops -tc=add??mul*" \
  'for (int64_t i = 0; i < n; ++i) db[i] += dy[i] * a[i];' \
  'for (int64_t i = 0; i < n; ++i) db[i] += dy[i] * b[i];'
mutant "scale backward kernel: the gradient overwritten, not added to" "-ts=ops -tc=rmsnorm?backward*" \
  'for (int64_t i = 0; i < n; ++i) da[i] += dy[i] * s;' \
  'for (int64_t i = 0; i < n; ++i) da[i] = dy[i] * s;'
# --- kernels/cpu/embedding.cpp ---
mutant "embedding backward: a repeated id keeps only its last row" "-ts=ops" \
  'for (int64_t j = 0; j < H; ++j) row[j] += d[j];' \
  'for (int64_t j = 0; j < H; ++j) row[j] = d[j];'
# --- kernels/cpu/fill.cpp ---
mutant "fill_f32: the last element left unfilled" "-ts=cpu-kernels -tc=fill*" \
  'for (int64_t i = 0; i < n; ++i) p[i] = value;' \
  'for (int64_t i = 0; i + 1 < n; ++i) p[i] = value;'
mutant "fill_zero: the byte count taken as a float count (a quarter zeroed)" "-ts=cpu-kernels -tc=fill*" \
  'void fill_zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }' \
  'void fill_zero(void* p, size_t bytes) { std::memset(p, 0, bytes / sizeof(float)); }'
# --- kernels/cpu/generate.cpp ---
mutant "generate sampler: a token drawn with the uniform number of its input's position, not its own" "-ts=generate -tc=sampled:?each*" \
  'sampling_uniform_at(key, int64_t(entry_pos[e]) + 1, sample_token)' \
  'sampling_uniform_at(key, int64_t(entry_pos[e]), sample_token)'
# --- kernels/cpu/linear_ce.cpp ---
mutant "CE: a label equal to V read past the row instead of NaN" "-ts=ops" \
  'return label >= 0 && int64_t(label) < V;' \
  'return label >= 0 && int64_t(label) <= V;'
# --- kernels/cpu/matmul.cpp ---
mutant "gemm: beta 1 overwrites C instead of adding to it" "-ts=ops -tc=linear_cross_entropy*" \
  'c.noalias() += alpha * (a * b);' \
  'c.noalias() = alpha * (a * b);'
mutant "gemm with K 0: C left as it was when beta is 0" "-ts=cpu-kernels -tc=gemm_f32*" \
  'if (beta == 0.0f) c.setZero();' \
  'if (beta == 0.0f) return;'
# --- kernels/cpu/metrics.cpp ---
mutant "loss weights normalised by their count, not their sum" "-ts=drafter" \
  'float denom = float(s) + eps;' \
  'float denom = float(n) + eps;'
# --- kernels/cpu/optimizer.cpp ---
mutant "Adam bias correction one step late" "-ts=optimizer" \
  'float bc1 = float(1.0 - std::pow(double(h.beta1), t));' \
  'float bc1 = float(1.0 - std::pow(double(h.beta1), t + 1.0));'
mutant "cosine reaches min_lr one step after the last" "-ts=trainer-reference,config-effects" \
  'int64_t span = s.total_steps - 1 - s.warmup_steps;' \
  'int64_t span = s.total_steps - s.warmup_steps;'
mutant "clipping also scales gradients below the bound" "-ts=optimizer,trainer-reference" \
  'if (c >= 1.0f) return;' \
  'if (c > 1e30f) return;'
# --- kernels/cpu/optimizer_slices.cpp ---
mutant "sum_squares: added to its slot, not written (the norm grows step by step)" "-ts=trainer-reference -tc=each?step?equals*" \
  'out[0] = s;' \
  'out[0] += s;'
mutant "norm_from_slice_sums: the squared norm, its square root forgotten" "-ts=trainer-reference -tc=each?step?equals*" \
  'norm[0] = float(std::sqrt(s));' \
  'norm[0] = float(s);'
# --- kernels/cpu/reduce.cpp ---
mutant "sum backward overwrites the gradient instead of adding" "-ts=ops" \
  'for (int64_t i = 0; i < n; ++i) dx[i] += g;' \
  'for (int64_t i = 0; i < n; ++i) dx[i] = g;'
# --- kernels/cpu/rmsnorm.cpp ---
mutant "rmsnorm backward adds a fresh dx to what its buffer held" "-tc=*fresh*dx*is*written*" \
  'dxr[j] = (dx_fresh ? 0.0f : dxr[j]) + term;' \
  'dxr[j] = (dx_fresh ? dxr[j] : dxr[j]) + term;'
# --- kernels/cpu/rope.cpp ---
mutant "RoPE: wrong sign of the rotation" "-ts=ops" \
  'yr[h * hd + i] = x1 * c - x2 * s;' \
  'yr[h * hd + i] = x1 * c + x2 * s;'
mutant "RoPE forward adds into its output (reads what the arena held)" "-tc=*arena*filled*with*NaN*" \
  'yr[h * hd + i] = x1 * c - x2 * s;' \
  'yr[h * hd + i] += x1 * c - x2 * s;'
mutant "rope backward adds a fresh gradient to what its buffer held" "-tc=*fresh*dx*is*written*" \
  'dxr[h * hd + i] = (dx_fresh ? 0.0f : dxr[h * hd + i]) + a;' \
  'dxr[h * hd + i] = (dx_fresh ? dxr[h * hd + i] : dxr[h * hd + i]) + a;'
mutant "rope backward overwrites a gradient another consumer wrote first" "-tc=*rope*backward*finite*" \
  '(dx_fresh ? 0.0f : dxr[h * hd + i + half]) + b;' \
  '(0.0f) + b;'
# --- kernels/cpu/slot_attention.cpp ---
mutant "slot attention: every row reads slot 0's keys and values" "-ts=generate -tc=greedy?outputs?equal*" \
  'const int64_t s = slot[i];' \
  'const int64_t s = slot[i] < 0 ? slot[i] : 0;'
mutant "slot attention: query head h reads the keys of kv head h % nkv, not h / (nh / nkv)" "-ts=generate -tc=greedy?outputs?equal*" \
  'const float* kh = k + s * slot_stride + (h / group) * hd;' \
  'const float* kh = k + s * slot_stride + (h % d.nkv) * hd;'
# --- kernels/cpu/spec_decode.cpp ---
mutant "spec_accept: the rollback bias ignored" "-ts=spec" \
  'state[f::target_len] = state[f::start] + rollback_bias;  // the rollback' \
  'state[f::target_len] = state[f::start];  // the rollback'
# --- kernels/cpu/spec_sampling.cpp ---
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
# --- kernels/cpu/swiglu.cpp ---
mutant "swiglu backward adds a fresh gradient to what its buffer held" "-tc=*arena*filled*with*NaN*" \
  'if (dg) dg[i] = (dg_fresh ? 0.0f : dg[i]) +' \
  'if (dg) dg[i] = (dg_fresh ? dg[i] : dg[i]) +'
mutant "swiglu backward reads gate after writing its gradient over it" "-tc=*swiglu*backward*writes*" \
  'if (du) du[i] = (du_fresh ? 0.0f : du[i]) + d * gi * s;' \
  'if (du) du[i] = (du_fresh ? 0.0f : du[i]) + d * g[i] * s;'
# --- kernels/cuda/dflash_attention_sm90.h ---
mutant "a wgmma descriptor advanced by twice its k-step" "-ts=attention-sm90-layout" \
  'return desc + uint64_t(bytes >> 4); }' \
  'return desc + uint64_t(bytes >> 3); }'
mutant "fused dq: K's second half read from the wrong slab" "-ts=attention-sm90-layout" \
  'uint32_t(wg) * slab_bytes(64), 64, 0,' \
  'uint32_t(wg) * slab_bytes(128), 64, 0,'
mutant "fused dq: dS^T elements stored 4 bytes apart in their piece" "-ts=attention-sm90-layout" \
  'return piece_offset(128, key, row / 8) + uint32_t(row % 8) * 2u;' \
  'return piece_offset(128, key, row / 8) + uint32_t(row % 8) * 4u;'
# --- kernels/cuda/gemm_candidates.h ---
mutant "GEMM tuner: the fastest candidate picked even when cuBLAS's check refused it" "-ts=gemm-table" \
  'if (c.agrees && (!best || c.ms < best->ms)) best = &c;' \
  'if (!best || c.ms < best->ms) best = &c;'
# --- kernels/heuristics.h ---
mutant "heuristics: dk/dv split only below twice the SMs, not one and a half" "-ts=heuristics" \
  'c.dkdv = f.dkdv ? *f.dkdv : (2 * ctx_ctas < 3 * sms ? Dkdv::split : Dkdv::ws);' \
  'c.dkdv = f.dkdv ? *f.dkdv : (2 * ctx_ctas < 2 * sms ? Dkdv::split : Dkdv::ws);'
mutant "heuristics: dq fused while the draft CTAs' phase is up to 30 % of the context work" "-ts=heuristics" \
  'const bool fused = draft_phase <= 0.08 * std::max(range0, ctx_chunks / double(sms));' \
  'const bool fused = draft_phase <= 0.3 * std::max(range0, ctx_chunks / double(sms));'
mutant "heuristics: dk/dv chunks by TMA where a chunk holds several blocks" "-ts=heuristics" \
  'c.tma_chunks = c.dkdv == Dkdv::ws && !f.no_tma && s.rows_per_kv() == 64 &&' \
  'c.tma_chunks = c.dkdv == Dkdv::ws && !f.no_tma && s.rows_per_kv() >= 64 &&'
mutant "heuristics: slot attention's slices by the keys alone, not filling the GPU at small batches" "-ts=heuristics" \
  'return int(std::clamp<int64_t>(std::max(by_keys, std::min(to_fill, most)), 1, kSlotMaxSlices));' \
  'return int(std::clamp<int64_t>(std::max(by_keys, std::min(int64_t(1), most)), 1, kSlotMaxSlices));'
mutant "heuristics: slot attention's slices as thin as the fill asks, below 32 cache rows" "-ts=heuristics" \
  'const int64_t to_fill = (2 * int64_t(sms) + pairs - 1) / pairs, most = C / kSlotMinKeysPerSlice;' \
  'const int64_t to_fill = (2 * int64_t(sms) + pairs - 1) / pairs, most = C;'
mutant "heuristics: CE rows by thread-block clusters on compute capability 10.0 and 12.0" "-ts=heuristics" \
  'if (const char* no = d.sm90_unavailable()) return {0, no};' \
  'if (d.major < 9) return {0, "no clusters"};'
mutant "heuristics: the Hopper kernels on any compute capability 9.x" "-ts=heuristics" \
  'if (major != 9 || minor != 0)' \
  'if (major != 9)'
mutant "heuristics: the Hopper kernels chosen in a build without them" "-ts=heuristics" \
  'if (!sm90_built) return "this build has no Hopper kernels' \
  'if (false) return "this build has no Hopper kernels'
mutant "heuristics: runtime.kernels = portable ignored by the rules" "-ts=heuristics" \
  'if (portable) return "runtime.kernels = \"portable\"";' \
  'if (false) return "runtime.kernels = \"portable\"";'
mutant "heuristics: 163 KB of shared memory a block on every 8.x" "-ts=heuristics" \
  'if (d.major == 8 && (d.minor == 0 || d.minor == 7)) return 163 * 1024;' \
  'if (d.major == 8) return 163 * 1024;'
mutant "heuristics: the mma.sync dq's widest key tile where it does not fit" "-ts=heuristics" \
  'if (portable_dq_smem(hdp, bf16, keys) <= smem_per_block(d)) return keys;' \
  'if (portable_dq_smem(hdp, bf16, keys) <= 227 * 1024) return keys;'
mutant "heuristics: the causal kernel's two m tiles where they do not fit" "-ts=heuristics" \
  'if (causal_tc_smem(hdp, mt) <= smem_per_block(d)) return mt;' \
  'if (causal_tc_smem(hdp, mt) <= 227 * 1024) return mt;'
mutant "heuristics: the target's attention on cuDNN for auto in a build without it" "-ts=heuristics" \
  'return cudnn_built;' \
  'return true;'
# --- model/batch_generator.cpp ---
mutant "generate sampler: top_p ignored (the whole distribution kept)" "-ts=generate -tc=*chi-square*" \
  's.top_p = opt_.ignore_top_p ? 1.0f : opt_.top_p;' \
  's.top_p = 1.0f;'
mutant "continuous batching: free slots refilled only when every slot is free" "-ts=generate -tc=continuous?batching*" \
  'while (next < requests.size()) {' \
  'while (next < requests.size() && active == 0) {'
mutant "generate: a stop id does not end its request" "-ts=generate -tc=greedy?outputs?equal*" \
  'const bool stopped = is_stop(t);' \
  'const bool stopped = false;'
mutant "generate: the host's copy of a slot's length not advanced by a step (written back when another slot ends)" "-ts=generate -tc=greedy?outputs?equal*" \
  'field(s, f::length) += 1;' \
  '(void)0;'
# --- model/dflash_ops.cpp ---
mutant "dflash_prepare: a keep of another shape accepted" "-ts=drafter" \
  'check_shape("dflash_prepare", keep, {B, N}, "keep");' \
  '(void)0;'
mutant "dflash_prepare: the noise blocks masked with token 0, not mask_token_id" "-ts=drafter" \
  'return {input_ids.dim(0), input_ids.dim(1), anchors.dim(1), bs, int32_t(mask), float(gamma)};' \
  'return {input_ids.dim(0), input_ids.dim(1), anchors.dim(1), bs, int32_t(0), float(gamma)};'
# --- model/drafter.cpp ---
mutant "a checkpointed layer skips its tail in the first pass too" "-ts=drafter" \
  'SkipLaunches tail(replay);' \
  'SkipLaunches tail(stash != nullptr);'
mutant "a checkpointed layer recomputes its tail again" "-ts=profile" \
  'SkipLaunches tail(replay);' \
  'SkipLaunches tail(false);'
mutant "a layer recomputed in part takes the up projection's kept values for gate" "-tc=*every*recompute*choice*" \
  'adopt_kept_values(gate, kept[1]);' \
  'adopt_kept_values(gate, kept[2]);'
mutant "a layer recomputed in part runs its gate and up projections again" "-ts=profile" \
  'SkipLaunches skip_gate_up(kept_mlp && replay);' \
  'SkipLaunches skip_gate_up(false);'
mutant "the MLP half's hook runs before the post-attention norm's backward" "-tc=*drafter's?hook*" \
  'Tensor y = ops::rmsnorm(h1, p.get(P(l, "post_attention_layernorm.weight")), eps);  // (B, T, H)' \
  'Tensor y = ops::rmsnorm(h1, p.get(P(l, "post_attention_layernorm.weight")), eps); if (layer_hook_) y = grad_hook(y, [hook = layer_hook_, l] { hook(l, LayerGrads::mlp); });'
mutant "drafter: the attention's residual add in the o projection takes the normed input" "-ts=drafter" \
  'nh * hd}), p.get(P(l, "self_attn.o_proj.weight")), h);' \
  'nh * hd}), p.get(P(l, "self_attn.o_proj.weight")), x);'
# --- model/drafter_decode.cpp ---
mutant "drafter decode: the context keys' rope positions from the row count, not the offset" "-ts=spec" \
  'const Tensor pos = ops::arange_from(at, R);  // (R)' \
  'const Tensor pos = ops::arange_from(count, R);  // (R)'
mutant "drafter decode: the rope frequencies with exponent i/hd, not 2i/hd" "-ts=spec" \
  'for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = float(1.0 / std::pow(s.rope_theta, double(2 * i) / double(s.head_dim)));' \
  'for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = float(1.0 / std::pow(s.rope_theta, double(i) / double(s.head_dim)));'
# --- model/drafter_spec.cpp ---
mutant "drafter spec: k_proj sized by the query heads, not the key/value heads" "-ts=drafter" \
  'p.push_back({L + "self_attn.k_proj.weight", {kv, H}});' \
  'p.push_back({L + "self_attn.k_proj.weight", {q, H}});'
mutant "drafter spec: o_proj listed as [q, H], transposed" "-ts=drafter -tc=drafter?parameters*" \
  'p.push_back({L + "self_attn.o_proj.weight", {H, q}});' \
  'p.push_back({L + "self_attn.o_proj.weight", {q, H}});'
mutant "drafter spec: q_norm over the hidden size instead of head_dim" "-ts=drafter" \
  'p.push_back({L + "self_attn.q_norm.weight", {hd}});' \
  'p.push_back({L + "self_attn.q_norm.weight", {H}});'
mutant "default target layers: one feature takes the middle layer rounded up" "-ts=drafter -tc=default?target?layers*" \
  'if (n == 1) return {L / 2};' \
  'if (n == 1) return {(L + 1) / 2};'
mutant "default target layers: halves rounded away from zero, not to even" "-ts=drafter -tc=default?target?layer*" \
  'ids.push_back(int64_t(std::nearbyint(x)));' \
  'ids.push_back(int64_t(std::round(x)));'
mutant "default target layers: a drafter of no features accepted" "-ts=drafter -tc=default?target?layers*" \
  'DF_CHECK(L >= 1 && n >= 1,' \
  'DF_CHECK(L >= 1 && n >= 0,'
# --- model/hf_config.cpp ---
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
mutant "target config: DeepSeek's n_routed_experts not read as a mixture of experts" "-ts=target -tc=target?config*" \
  'for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})' \
  'for (const char* key : {"num_experts", "num_local_experts"})'
mutant "target config: a top-level rope_theta wins over rope_parameters.rope_theta" "-ts=target -tc=target?config*" \
  'if (rope && r.find(*rope, "rope_theta")) {' \
  'if (rope && r.find(*rope, "rope_theta") && !r.find(j, "rope_theta")) {'
mutant "target config: a class name given as model_type accepted" "-ts=target -tc=target?config*" \
  'if (name == "qwen3" || (!model_type && name == "Qwen3ForCausalLM")) arch = TargetArch::qwen3;' \
  'if (name == "qwen3" || name == "Qwen3ForCausalLM") arch = TargetArch::qwen3;'
# --- model/prompt_check.cpp ---
mutant "prompt check: prompt + max_new equal to max_position_embeddings refused" "-tc=*check_decode_prompt:?prompt*" \
  'DF_CHECK(max_positions <= 0 || need <= max_positions,' \
  'DF_CHECK(max_positions <= 0 || need < max_positions,'
mutant "prompt check: max_new_tokens 0 accepted (a decode that generates nothing)" "-ts=spec -tc=spec?decoder*" \
  'DF_CHECK(max_new >= 1, where << ": max_new_tokens is " << max_new << "; it must be >= 1");' \
  'DF_CHECK(max_new >= 0, where << ": max_new_tokens is " << max_new << "; it must be >= 1");'
# --- model/spec_decoder.cpp ---
mutant "the decoder's programs are recorded without the profiler's labels" "-ts=profile" \
  'ctx_->attach_profile(o.profile);' \
  'ctx_->attach_profile(nullptr);'
mutant "the target-alone baseline decodes past a stop token" "-tc=*golden?stop-token?example*" \
  'while (int64_t(d.output.size()) < end && !is_stop(d.output.back())) {' \
  'while (int64_t(d.output.size()) < end) {'
mutant "spec decoder: set_position refuses a block that ends exactly at the capacity" "-ts=spec -tc=spec?decoder*" \
  'DF_CHECK(position >= 1 && position + block_size() <= opt_.max_len,' \
  'DF_CHECK(position >= 1 && position + block_size() < opt_.max_len,'
mutant "spec decoder: a short prefill chunk commits the argmax of the chunk's last slot, not its last real row" "-ts=spec" \
  'ctl = {int32_t(c), int32_t(c - 1)};' \
  'ctl = {int32_t(c), int32_t(P - 1)};'
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
# --- model/spec_ops.cpp ---
mutant "spec_accept: a result without room for the header accepted" "-ts=spec" \
  'check_i32(kOp, result, kSpecRoundHeader + bs, "result");' \
  'check_i32(kOp, result, result.numel(), "result");'
mutant "spec prefill commit: the margin and the top logit swapped" "-ts=spec" \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_prefill_commit(ps, pa, pm, pt, pr); });' \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_prefill_commit(ps, pa, pt, pm, pr); });'
mutant "spec step commit: the margin and the top logit swapped" "-ts=spec" \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_step_commit(ps, pa, pm, pt, pr); });' \
  'if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_step_commit(ps, pa, pt, pm, pr); });'
# --- model/stop_tokens.cpp ---
mutant "stop tokens: an eos_token_id equal to the vocabulary size accepted" "-ts=spec,bad-input" \
  'v.get<int64_t>() < vocab_size,' \
  'v.get<int64_t>() <= vocab_size,'
# --- model/target.cpp ---
mutant "target: the fused residual add drops its first operand" "-ts=target*" \
  'if (w) return ops::add_rmsnorm(a, b, *w, eps);' \
  'if (w) return ops::add_rmsnorm(b, b, *w, eps);'
mutant "target: up_proj loaded into the packed weight's gate rows" "-ts=target*" \
  'load_into(layer_key(l, "mlp.gate_proj.weight"), p.gate);' \
  'load_into(layer_key(l, "mlp.up_proj.weight"), p.gate);'
mutant "target features: the layers joined last to first" "-ts=target*" \
  'for (int64_t id : layer_ids_) parts.push_back(kept[size_t(id)]);' \
  'for (int64_t id : layer_ids_) parts.insert(parts.begin(), kept[size_t(id)]);'
mutant "target: weights holding exactly one layer too many get no num_hidden_layers hint" "-tc=*beyond?num_hidden_layers*" \
  'if (highest_layer >= s.num_hidden_layers)' \
  'if (highest_layer > s.num_hidden_layers)'
mutant "target: the count of unexplained tensors left unlisted is all of them, not those past 8" "-ts=target -tc=target*" \
  'if (extra.size() > 8) list += ", and " + std::to_string(extra.size() - 8) + " more";' \
  'if (extra.size() > 8) list += ", and " + std::to_string(extra.size()) + " more";'
# --- model/target_decode.cpp ---
mutant "target decoder: the first layer id's features repeated" "-ts=spec" \
  'out.features = ops::concat(out.features, kept[size_t(t.layer_ids_[i])], 1);' \
  'out.features = ops::concat(out.features, kept[size_t(t.layer_ids_[0])], 1);'
# --- model/target_random.cpp ---
mutant "random target: weights of standard deviation std / sqrt(3)" "-ts=target" \
  'const float half_width = float(std * std::sqrt(3.0));' \
  'const float half_width = float(std);'
# --- model/tiny_tokenizer.cpp ---
mutant "tiny tokenizer: <think> and </think> marked special (dropped when decoding)" "-ts=tiny-tokenizer" \
  'bool special(size_t i) { return i != 3 && i != 4; }' \
  'bool special(size_t i) { return true; }'
mutant "tiny tokenizer: written for a vocabulary without room for it" "-ts=tiny-tokenizer" \
  '  if (vocab_size < kTinyTokenizerMinVocab) return false;' \
  '  if (vocab_size < 2) return false;'
# --- model/toy_lm.cpp ---
mutant "toy model: labels are the current token, not the next" "-ts=toy" \
  'labels[b * size_t(S) + t] = seq[t + 1];' \
  'labels[b * size_t(S) + t] = seq[t];'
mutant "toy model: a layer without its residual" "-ts=toy" \
  'return ops::add(x, ops::linear(a, p.get(lname(l, "down"))));' \
  'return ops::linear(a, p.get(lname(l, "down")));'
# --- python/dflash_data/bench_chat.py ---
mutant "bench: enable_thinking passed without --reasoning" "python/tests/test_bench_run.py" \
  '    switch = {"enable_thinking": reasoning == "on"} if reasoning is not None else {}' \
  '    switch = {"enable_thinking": reasoning == "on"}'
# --- python/dflash_data/bench_figures.py ---
mutant "bench: pooled tau counts the prompts without a round" "python/tests/test_bench_datasets.py python/tests/test_bench_run.py" \
  '        "tau": sum(t for t in prompt_tau if t > 0) / with_rounds if with_rounds else 0.0,' \
  '        "tau": sum(t for t in prompt_tau if t > 0) / len(prompt_tau) if with_rounds else 0.0,'
# --- python/dflash_data/chat_render.py ---
mutant "prepare: an assistant span starts at its role header" "python/tests/test_prepare_masks.py" \
  '        start = at_header + len(header)' \
  '        start = at_header'
mutant "prepare: the empty reasoning block a template inserts is trained on" "python/tests/test_prepare_masks.py" \
  '                start = block.end()' \
  '                start = start'
mutant "prepare: an assistant span stops before its end-of-turn token" "python/tests/test_prepare_masks.py" \
  '        spans.append((start, cursor))' \
  '        spans.append((start, closing_at))'
mutant "prepare: an earlier turn's reasoning searched for as rendered content" "python/tests/test_prepare_masks.py" \
  '        content = content.rsplit(fmt.think_close, 1)[1]' \
  '        content = content'
# --- python/dflash_data/prepare_generate.py ---
mutant "prepare --generate-prompts last: the final assistant turn left in the prompt" "python/tests/test_prepare_generate.py -k last" \
  'return conv_id, conv.messages[: turns[-1]]' \
  'return conv_id, conv.messages[: turns[-1] + 1]'
mutant "prepare --generate-prompts all: an earlier answer keeps its stop token" "python/tests/test_prepare_generate.py -k all_builds" \
  'ids = output_ids[:-1] if finish == "stop" and output_ids else output_ids' \
  'ids = output_ids'
mutant "prepare --generated: the output's stop token masked out" "python/tests/test_prepare_generate.py -k generated_records" \
  'ids, mask = list(prompt) + list(output), bytearray([0] * len(prompt) + [1] * len(output))' \
  'ids, mask = list(prompt) + list(output), bytearray([0] * len(prompt) + [1] * (len(output) - 1) + [0])'
# --- python/dflash_data/track.py ---
mutant "track: a record at a step already forwarded sent again after a resume" "python/tests/test_track.py" \
  '            if step <= last.get(kind, -1):' \
  '            if step < last.get(kind, -1):'
mutant "key metrics.run_name ignored by the follower" "python/tests/test_track_settings.py" \
  '        "run_name": pick(args.run_name, "run_name"),' \
  '        "run_name": args.run_name or "",'
mutant "key metrics.wandb_project ignored by the follower" "python/tests/test_track_settings.py" \
  '        "wandb_project": pick(args.wandb_project, "wandb_project"),' \
  '        "wandb_project": args.wandb_project or "",'
mutant "key metrics.wandb_entity ignored by the follower" "python/tests/test_track_settings.py" \
  '        "wandb_entity": pick(args.wandb_entity, "wandb_entity"),' \
  '        "wandb_entity": args.wandb_entity or "",'
mutant "key metrics.wandb_mode ignored by the follower" "python/tests/test_track_settings.py" \
  '        "wandb_mode": pick(args.wandb_mode, "wandb_mode"),' \
  '        "wandb_mode": args.wandb_mode or "",'
# --- runtime/allocator.cpp ---
mutant "offset planner: worst fit instead of best fit" "-ts=seal" \
  'if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;' \
  'if (it->second >= bytes && (best == free_.end() || it->second > best->second)) best = it;'
mutant "offset planner: a freed block at the top does not lower it" "-ts=seal" \
  'if (it->first + it->second == top_) {' \
  'if (false) {'
# --- runtime/autograd.cpp ---
mutant "a gradient takes the storage of an input that is still held elsewhere" "-tc=*swiglu*backward*writes*" \
  'donor.impl_ptr().use_count() == 1 && donor.impl().storage.use_count() == 1' \
  'donor.impl_ptr().use_count() >= 1 && donor.impl().storage.use_count() >= 1'
mutant "a gradient takes the storage of an input that a view still reads" "-tc=*swiglu*backward*writes*" \
  'use_count() == 1 && donor.impl().storage.use_count() == 1 &&' \
  'use_count() == 1 && true &&'
mutant "a fresh leaf gradient is overwritten by every use, not only the first" "-tc=*FreshLeafGrads*" \
  'return ids_.count(leaf.id()) != 0 && touched_.insert(leaf.id()).second;' \
  'return ids_.count(leaf.id()) != 0 && (touched_.insert(leaf.id()), true);'
mutant "an op that only adds keeps a fresh leaf's stale gradient" "-tc=*FreshLeafGrads*" \
  'f && f->first_touch(t)) ops::fill_(t.grad(), 0.0f);' \
  'f && f->first_touch(t)) (void)0;'
mutant "leaves no backward reached keep last step's gradients" "-tc=*FreshLeafGrads*" \
  'if (touched_.insert(l.id()).second) ops::fill_(l.grad(), 0.0f);' \
  'if (touched_.insert(l.id()).second) (void)l;'
mutant "checkpoint: an output that is an input's alias replaces that input's gradient buffer" "-ts=checkpoint" \
  'if (preset.count(outputs[i].id())) ops::accumulate_(g.at(outputs[i].id()), grads[i]);' \
  'if (false) ops::accumulate_(g.at(outputs[i].id()), grads[i]);'
# --- runtime/checksum.cpp ---
mutant "crc32_file: the CRC restarts at every 4 MiB chunk" "-ts=checkpoint-io" \
  'c.update(buffer.data(), size_t(n));' \
  'c = Crc32(); c.update(buffer.data(), size_t(n));'
mutant "CRC-32: two slice-by-8 tables swapped" "-ts=checkpoint-io" \
  'kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu]' \
  'kTables[3][lo >> 24] ^ kTables[4][hi & 0xffu]'
# --- runtime/checksum.h ---
mutant "crc32: the value lacks the final complement" "-ts=checkpoint-io" \
  'uint32_t value() const { return ~state_; }' \
  'uint32_t value() const { return state_; }'
# --- runtime/context.cpp ---
mutant "a recording given its plan's placement still uses the online offsets" "-tc=*placement*offsets*" \
  'offset = placement_->offsets[placed_++];' \
  'offset = online + 0 * placement_->offsets[placed_++];'
mutant "the outputs of skipped ops take arena memory" "-tc=*SkipLaunches*scope*" \
  'const bool unread = skip_launches_ > 0;' \
  'const bool unread = false;'
mutant "context: a begin() inside another recording accepted" "-ts=seal -tc=context*" \
  'DF_CHECK(mode_ == Mode::eager, "begin(" << mode_name(mode) << ", '\''" << program << "'\'') while already in "' \
  'DF_CHECK(true, "begin(" << mode_name(mode) << ", '\''" << program << "'\'') while already in "'
mutant "context: a CPU recording without a sink for its kernel calls accepted" "-ts=seal -tc=context*" \
  'DF_CHECK(mode != Mode::record || device_.is_cuda() || cpu_sink,' \
  'DF_CHECK(mode != Mode::record || device_.is_cpu() || cpu_sink,'
mutant "context: a persistent allocation after the seal accepted" "-ts=seal -tc=context*" \
  'if (sealed_) refuse_sealed("persistent allocation", bytes);' \
  '(void)0;'
# --- runtime/fileio.cpp ---
mutant "atomic write: a writer that ignores a failed write still renames" "-ts=checkpoint-io" \
  'if (sink_failed) throw OsFailure{' \
  'if (false) throw OsFailure{'
mutant "read_file: a file whose size stat gives as 0 (/proc) reads empty" "-ts=checkpoint-io" \
  'if (got == out.size()) out.resize(out.size() * 2 + 4096);' \
  'if (got == out.size()) break;'
mutant "read_file: a directory read as a file, not refused by name" "-ts=safetensors" \
  'if (rc != 0 || !S_ISREG(st.st_mode)) {' \
  'if (rc != 0) {'
# --- runtime/kernel_paths.cpp ---
mutant "runtime.kernels: the rules' device ignores the process's choice" "-ts=kernel-paths" \
  'hw.portable = kernel_paths() == KernelPaths::portable;' \
  'hw.portable = false;'
mutant "runtime.kernels: the rules' device says the build holds the Hopper kernels exactly when it does not" "-ts=kernel-paths" \
  'hw.sm90_built = hopper_kernels_built();' \
  'hw.sm90_built = !hopper_kernels_built();'
# --- runtime/gemm_tuning.cpp ---
mutant "a GEMM table line loses its beta flag when read back" "-ts=gemm-table" \
  'k.ta = ta == '\''T'\'', k.tb = tb == '\''T'\'', k.ab_bf16 = ab_s == "bf16", k.c_bf16 = c_s == "bf16", k.accumulate = beta == 1;' \
  'k.ta = ta == '\''T'\'', k.tb = tb == '\''T'\'', k.ab_bf16 = ab_s == "bf16", k.c_bf16 = c_s == "bf16", k.accumulate = false;'
mutant "the GEMM table writes cuBLAS's own algorithm as nine integers" "-ts=gemm-table" \
  'if (is_cublas_default(c)) line += " cublas";' \
  'if (false) line += " cublas";'
mutant "the GEMM table reads -1 0 0 0 0 0 0 0 0 as a cuBLASLt algorithm" "-ts=gemm-table" \
  'ok = ok && !is_cublas_default(cfg);  // -1 0 ... 0 is written "cublas"' \
  'ok = ok;'
# --- runtime/ops/attention.cpp ---
mutant "dflash_attention: a saved lse of the wrong shape is accepted" "-ts=attention -tc=*saved*,bad?arguments*" \
  'saved->out.dtype() == q.dtype() && saved->lse.shape() == lse_shape;' \
  'saved->out.dtype() == q.dtype();'
mutant "dflash_attention_all_tiles: a partial context tile is not counted" "-ts=attention -tc=*tiles*" \
  'return batch * n_blocks * ((context_len + key_tile - 1) / key_tile + n_blocks);' \
  'return batch * n_blocks * (context_len / key_tile + n_blocks);'
mutant "dflash_attention backward: k's and v's gradients swapped" "-ts=attention -tc=*backward*" \
  'float *dq = f32(g.in(q)), *dk = f32(g.in(k)), *dv = f32(g.in(v));' \
  'float *dq = f32(g.in(q)), *dk = f32(g.in(v)), *dv = f32(g.in(k));'
# --- runtime/ops/cast.cpp ---
mutant "cast: the CPU takes any source dtype, checking only the target" "-ts=ops -tc=cast?on?the?CPU?refuses*" \
  'DF_CHECK(from == DType::f32 && to == DType::f32,' \
  'DF_CHECK(to == DType::f32,'
mutant "cast backward: the input's gradient overwritten, not added to" "-ts=ops -tc=cast?backward*" \
  'if (dy.defined() && dx.defined()) accumulate_(dx, dy);' \
  'if (dy.defined() && dx.defined()) copy_(dx, dy);'
# --- runtime/ops/causal_attention.cpp ---
mutant "the profile counts the target's causal attention over every (query, key) pair, not the visible half" "-ts=profile" \
  'note_flop_cost(4.0 * double(hd * nh * B) * double(S) * double(S + 1) / 2.0, "causal attention forward");' \
  'note_flop_cost(4.0 * double(hd * nh * B) * double(S) * double(S), "causal attention forward");'
mutant "causal_attention: k's batch dim is not compared with q's" "-ts=target -tc=causal_attention*" \
  'DF_CHECK(k.dim(0) == B && k.dim(1) == S && k.dim(3) == hd,' \
  'DF_CHECK(k.dim(1) == S && k.dim(3) == hd,'
mutant "causal_attention: v's dtype is not checked on the CPU" "-ts=target -tc=causal_attention*" \
  'check_dtype(kOp, v, DType::f32, "v");' \
  'check_dtype(kOp, k, DType::f32, "v");'
# --- runtime/ops/concat.cpp ---
mutant "concat_all: every part written at the row's start" "-tc=concat_all*" \
  'offset += inner[i];' \
  'offset += 0 * inner[i];'
mutant "concat: records no backward when only the second input needs a gradient" "-ts=ops -tc=concat*" \
  'bool grad = needs_grad({&a, &b});' \
  'bool grad = needs_grad({&a});'
mutant "concat: the dims after the concatenated one are not compared" "-ts=ops -tc=concat*" \
  'DF_CHECK(i == d || a.dim(i) == b.dim(i),' \
  'DF_CHECK(i >= d || a.dim(i) == b.dim(i),'
mutant "split_columns: widths short of the last dim accepted" "-ts=ops -tc=split_columns*" \
  'DF_CHECK(total == x.shape().last(), kOp << ": the widths add up to "' \
  'DF_CHECK(total <= x.shape().last(), kOp << ": the widths add up to "'
# --- runtime/ops/decode.cpp ---
mutant "decode ops: a device scalar of several elements accepted" "-ts=spec" \
  'DF_CHECK(t.numel() == 1, op << ": " << role << " is " << t.describe() << " but must hold one i32 (shape [1])");' \
  'DF_CHECK(t.numel() >= 1, op << ": " << role << " is " << t.describe() << " but must hold one i32 (shape [1])");'
mutant "cached and slot attention: a scale of 0 accepted" "-ts=spec" \
  'DF_CHECK(std::isfinite(scale) && scale > 0.0f, op' \
  'DF_CHECK(std::isfinite(scale) && scale >= 0.0f, op'
mutant "copy_rows: dst and src rows of different sizes accepted" "-ts=spec" \
  'DF_CHECK(src_rows > 0 && row_bytes == src.nbytes() / size_t(src_rows),' \
  'DF_CHECK(src_rows > 0,'
# --- runtime/ops/elementwise.cpp ---
mutant "add: shapes with the same element count are accepted" "-ts=ops,tensor -tc=*add*,dtype?*" \
  'DF_CHECK(a.shape() == b.shape(), op << ": shapes differ: "' \
  'DF_CHECK(a.numel() == b.numel(), op << ": shapes differ: "'
mutant "add backward: the second input's gradient overwritten, not added to" "-ts=ops -tc=add?*" \
  'else accumulate_(db, dy);' \
  'else copy_(db, dy);'
mutant "mul backward: the second input's gradient into the first's buffer" "-ts=ops -tc=add?*" \
  'float* db = f32(g.in(b));' \
  'float* db = f32(g.in(a));'
# --- runtime/ops/embedding.cpp ---
mutant "embedding: the ids' count read from their first dim only" "-ts=ops -tc=embedding?forward*" \
  'int64_t n = ids.numel(), V = table.dim(0), H = table.dim(1);' \
  'int64_t n = ids.dim(0), V = table.dim(0), H = table.dim(1);'
mutant "embedding: the backward keyed on the ids' gradient flag, not the table's" "-ts=ops -tc=embedding?backward*" \
  'if (needs_grad({&table})) {' \
  'if (needs_grad({&ids})) {'
# --- runtime/ops/fused_norms.cpp ---
mutant "rmsnorm_rope: q rotated as if it had k's head count" "-tc=*rmsnorm_rope?gives*" \
  'kernels::cpu::rope_forward(pyq, pp, pf, pyq, rows, hq, hd);' \
  'kernels::cpu::rope_forward(pyq, pp, pf, pyq, rows, hk, hd);'
mutant "rmsnorm_rope: k normed with q's weight" "-tc=*rmsnorm_rope?gives*" \
  'kernels::cpu::rmsnorm_forward(pk, pwk, pyk, nullptr, rows * hk, hd, eps);' \
  'kernels::cpu::rmsnorm_forward(pk, pwq, pyk, nullptr, rows * hk, hd, eps);'
mutant "rmsnorm_rope_into_slots: v's cache rows given k's columns" "-tc=rmsnorm_rope_into_slots*" \
  'scatter_slot_rows_(v_cache, parts[2].reshape({n, nkv, hd}), slot, positions);' \
  'scatter_slot_rows_(v_cache, parts[1].reshape({n, nkv, hd}), slot, positions);'
# --- runtime/ops/group_heads.cpp ---
mutant "the lm_head's dropped slot-0 rows get a gradient" "-ts=drafter" \
  'restore(dy, dx, groups, row_bytes, period, 0);' \
  'restore(dy, dx, groups, row_bytes, period, 0x3F);'
mutant "drop_group_heads backward: an accumulating gradient is overwritten" "-ts=ops -tc=*group_heads*" \
  'if (fresh && dx.dtype() == dy.dtype()) {' \
  'if (dx.dtype() == dy.dtype()) {'
mutant "with_group_heads: a tensor that requires grad is not refused" "-ts=ops -tc=*group_heads*" \
  'DF_CHECK(!needs_grad({&y}), "with_group_heads: "' \
  'DF_CHECK(true, "with_group_heads: "'
# --- runtime/ops/linear_ce.cpp ---
mutant "linear_cross_entropy (frozen lm_head) backward: dh overwritten, not added to" "-ts=ops -tc=linear_cross_entropy*" \
  'for (int64_t i = 0; i < n; ++i) d[i] += k[0] * p[i];' \
  'for (int64_t i = 0; i < n; ++i) d[i] = k[0] * p[i];'
mutant "linear_cross_entropy (trainable lm_head) backward: dh overwritten, not added to" "-ts=ops -tc=linear_cross_entropy*" \
  'pdh + r0 * H, H, 1.0f);  // dh += dlogits W' \
  'pdh + r0 * H, H, 0.0f);  // dh += dlogits W'
mutant "linear_cross_entropy (trainable lm_head) backward: dW keeps only the last chunk" "-ts=ops -tc=linear_cross_entropy*" \
  'pdw, H, 1.0f);  // dW += dlogits^T h' \
  'pdw, H, 0.0f);  // dW += dlogits^T h'
# --- runtime/ops/matmul.cpp ---
mutant "linear_residual: the residual gets no gradient" "-tc=linear_residual:*" \
  'if (r.defined() && r.requires_grad()) g.pass(r, dc);' \
  '(void)r;'
mutant "linear_residual on the CPU: the residual not added" "-tc=linear_residual:*" \
  'ctx().launch([=, n = M * N] { kernels::cpu::add_forward(r, c, c, n); });' \
  '(void)r;'
mutant "matmul backward: dB overwritten even when b already holds a gradient" "-ts=ops,autograd" \
  'const float beta = db_fresh ? 0.0f : 1.0f;' \
  'const float beta = 0.0f;'
mutant "linear_concat_rows backward: every batch row overwrites a fresh dW (only the last row kept)" "-ts=ops,autograd" \
  'r == 0 && dw_fresh ? 0.0f : 1.0f' \
  'dw_fresh ? 0.0f : 1.0f'
# --- runtime/ops/metrics.cpp ---
mutant "weighted_accuracy: weights of another length than the labels accepted" "-ts=ops -tc=weighted_accuracy*" \
  'DF_CHECK(argmax.numel() == labels.numel() && labels.numel() == w.numel(),' \
  'DF_CHECK(argmax.numel() == labels.numel(),'
mutant "normalize_weights: eps dropped from the denominator" "-ts=ops -tc=normalize_weights*" \
  'ctx().launch([=] { kernels::cpu::normalize_weights(pw, n, eps, po); });' \
  'ctx().launch([=] { kernels::cpu::normalize_weights(pw, n, 0.0f, po); });'
# --- runtime/ops/primitives.cpp ---
mutant "accumulate_: a source larger than the destination accepted" "-ts=ops -tc=accumulate_*" \
  'DF_CHECK(dst.numel() == src.numel(), "accumulate: destination "' \
  'DF_CHECK(dst.numel() <= src.numel(), "accumulate: destination "'
mutant "copy_: tensors of another dtype but as many bytes accepted" "-ts=ops -tc=accumulate_*" \
  'DF_CHECK(dst.nbytes() == src.nbytes() && dst.dtype() == src.dtype(),' \
  'DF_CHECK(dst.nbytes() == src.nbytes(),'
# --- runtime/ops/reduce.cpp ---
mutant "mean forward: the sum, not divided by the count" "-ts=ops -tc=mean*" \
  'if (scale == 1.0f) {' \
  'if (scale != 0.0f) {'
mutant "mean: an empty tensor's mean is NaN, not 0" "-ts=ops -tc=mean*" \
  'return reduce("mean", x, x.numel() ? 1.0f / float(x.numel()) : 0.0f);' \
  'return reduce("mean", x, 1.0f / float(x.numel()));'
# --- runtime/ops/rmsnorm.cpp ---
mutant "rmsnorm: records no backward when only the weight needs a gradient" "-ts=ops -tc=rmsnorm?with?a?frozen*" \
  'bool grad = needs_grad({&x, &weight});' \
  'bool grad = needs_grad({&x});'
mutant "rmsnorm backward: dx written over even when it already holds a gradient" "-ts=ops -tc=rmsnorm?backward*" \
  'ctx().launch([=, fresh = dx_fresh] {' \
  'ctx().launch([=, fresh = true] {'
# --- runtime/ops/rope.cpp ---
mutant "rope: a head dim of 0 accepted" "-ts=ops -tc=rope?refuses*" \
  'DF_CHECK(hd >= 2 && hd % 2 == 0, "rope: x "' \
  'DF_CHECK(hd % 2 == 0, "rope: x "'
mutant "rope: inv_freq's dtype not checked" "-ts=ops -tc=rope?refuses*" \
  'check_dtype("rope", inv_freq, DType::f32, "inv_freq");' \
  'check_dtype("rope", inv_freq, inv_freq.dtype(), "inv_freq");'
mutant "rope backward: dx written over even when it already holds a gradient" "-ts=ops -tc=rope?backward*" \
  'ctx().launch([=, fresh = fresh] { kernels::cpu::rope_backward(pdy, pp, pf, pdx, rows, heads, hd, fresh); });' \
  'ctx().launch([=, fresh = fresh] { kernels::cpu::rope_backward(pdy, pp, pf, pdx, rows, heads, hd, true); });'
# --- runtime/ops/swiglu.cpp ---
mutant "swiglu_halves: the halves swapped (silu of up, times gate)" "-tc=*swiglu_halves?gives*" \
  'kernels::cpu::swiglu_forward(pg + 2 * I * r, pg + 2 * I * r + I, py + I * r, I);' \
  'kernels::cpu::swiglu_forward(pg + 2 * I * r + I, pg + 2 * I * r, py + I * r, I);'
mutant "swiglu: up's gradient may take gate's storage" "-ts=autograd,ops -tc=swiglu*" \
  'auto [du, du_fresh] = g.in_overwritable(up, up);' \
  'auto [du, du_fresh] = g.in_overwritable(up, gate);'
# --- runtime/ops/view.cpp ---
mutant "reshape backward: the gradient dropped when the base is a leaf or already holds one" "-ts=autograd -tc=reshape*" \
  'if (dy.defined()) g.pass(base, view_of(dy, base.shape()));' \
  'if (dy.defined()) g.adopt(base, view_of(dy, base.shape()));'
mutant "rows: a negative begin accepted" "-ts=autograd -tc=rows*" \
  'DF_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0),' \
  'DF_CHECK(ndim() >= 1 && begin <= end && end <= dim(0),'
mutant "rows backward: the range's gradient overwrites what the base's holds" "-ts=autograd -tc=rows*" \
  'ops::accumulate_(view_of(db, s, size_t(begin) * grad_row_bytes), dy);' \
  'ops::copy_(view_of(db, s, size_t(begin) * grad_row_bytes), dy);'
# --- runtime/optimizer.cpp ---
mutant "gradients not zeroed after the update" "-ts=trainer-reference" \
  'if (zero_grads_) x.launch([=] { kernels::cpu::fill_zero(g, size_t(n) * sizeof(float)); });  // micro-batches add to 0' \
  '(void)0;'
mutant "the profile leaves the optimizer's norm pass out of the update's bytes" "-ts=profile" \
  'note_bytes_cost(double(n) * (34.0 + (zero_grads_ ? 4.0 : 0.0)));' \
  'note_bytes_cost(double(n) * (30.0 + (zero_grads_ ? 4.0 : 0.0)));'
mutant "parameter store: a sharded rank's part of a straddling parameter taken from the parameter's start" "-ts=sharded-checkpoint -tc=sharded?checkpoint*" \
  'part.copy_from_host(values + (begin - off), size_t(end - begin) * sizeof(float));' \
  'part.copy_from_host(values, size_t(end - begin) * sizeof(float));'
mutant "parameter store: the flat size padded to the alignment only, not to world equal aligned slices" "-ts=optimizer -tc=parameter?store*" \
  'const int64_t unit = align * layout.world;' \
  'const int64_t unit = align;'
# --- runtime/placement.cpp ---
mutant "offline placement ignores blocks that die after this one starts" "-tc=*offline*placement*" \
  'if (blocks[j].start < b.end && b.start < blocks[j].end) busy.emplace_back' \
  'if (blocks[j].start < b.end && b.start < blocks[j].start) busy.emplace_back'
# --- runtime/profile.cpp ---
mutant "the profile check adds the traced gaps to the kernels instead of bounding the idle by them" "-ts=profile" \
  'if (reference > most) return (reference - most) / reference;' \
  'if (reference != most) return std::fabs(reference - most) / reference;'
mutant "the profile check holds the kernels against the untraced replay, not the traced one they come from" "-ts=profile" \
  'double profile_reference_ms(const ProfileTableInput& in) { return in.traced_ms > 0 ? in.traced_ms : in.measured_ms; }' \
  'double profile_reference_ms(const ProfileTableInput& in) { return in.measured_ms; }'
mutant "profile: a row's time summed over the replays, not averaged" "-ts=profile -tc=profile*" \
  'r.ms += times_ms[i] / double(replays);' \
  'r.ms += times_ms[i];'
mutant "profile: tracing's cost per call divided by the rows, not the calls" "-ts=profile -tc=profile*" \
  'for (const ProfileRow& r : in.rows) calls += r.calls;' \
  'for (const ProfileRow& r : in.rows) calls += 1;'
mutant "profile: a row's share of the kernels' time only, idle left out" "-ts=profile -tc=profile*" \
  'total > 0 ? 100.0 * r.ms / total : 0.0, work.c_str(), rate.c_str());' \
  'kernels > 0 ? 100.0 * r.ms / kernels : 0.0, work.c_str(), rate.c_str());'
# --- runtime/safetensors.cpp ---
mutant "safetensors BOOL loaded as u8 keeps bytes other than 0 and 1" "-tc=*conversions?from?F16*" \
  'for (uint8_t& x : b) x = x != 0;' \
  'for (uint8_t& x : b) (void)x;'
mutant "safetensors BOOL read as ints keeps bytes other than 0 and 1" "-tc=*conversions?from?F16*" \
  'out[i] = p[i] != 0;' \
  'out[i] = p[i];'
mutant "safetensors load_into: a view of the wrong shape accepted" "-tc=*load_into*" \
  'DF_CHECK(dst.shape() == shape, where(name)' \
  'DF_CHECK(true, where(name)'
mutant "safetensors: U8 read as ints sign-extended (bytes over 127 come out negative)" "-ts=safetensors -tc=safetensors*" \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];' \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = int8_t(p[i]);'
mutant "safetensors writer: a header already 8-byte aligned padded with 8 more spaces" "-ts=safetensors -tc=safetensors*" \
  'text.append((8 - text.size() % 8) % 8, '\'' '\'');' \
  'text.append(8 - text.size() % 8, '\'' '\'');'
mutant "safetensors: a missing tensor's message lists 7 of the names, not 6" "-ts=safetensors -tc=safetensors*" \
  'for (size_t i = 0; i < names_.size() && i < 6; ++i)' \
  'for (size_t i = 0; i < names_.size() && i <= 6; ++i)'
mutant "safetensors: a NUL byte in the header accepted" "-ts=refused-writes -tc=a?safetensors?header*" \
  'DF_CHECK(!nul, f << ": the header holds a NUL byte at offset "' \
  'DF_CHECK(true, f << ": the header holds a NUL byte at offset "'
mutant "safetensors: whitespace other than spaces after the header accepted" "-ts=refused-writes -tc=a?safetensors?header*" \
  'while (end > 0 && text[end - 1] == '\'' '\'') --end;' \
  'while (end > 0 && std::isspace(uint8_t(text[end - 1]))) --end;'
# --- runtime/splitmix.h ---
mutant "splitmix64: the final xor-shift by 32, not 31" "-ts=data -tc=splitmix64*" \
  'return x ^ (x >> 31);' \
  'return x ^ (x >> 32);'
# --- runtime/tensor.cpp ---
mutant "copy_to_host from a tensor without memory not refused" "-ts=seal" \
  'DF_CHECK(bytes == 0 || impl().storage->data, "copy_to_host from "' \
  'DF_CHECK(true, "copy_to_host from "'
mutant "tensor: u8 host values read as signed bytes" "-ts=tensor,safetensors,export" \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = tmp[i];' \
  'for (size_t i = 0; i < out.size(); ++i) out[i] = int8_t(tmp[i]);'
mutant "tensor: a bf16 scalar's item() refused" "-ts=tensor" \
  'return dtype() == DType::f32 || dtype() == DType::bf16 ? to_floats()[0] : float(to_ints()[0]);' \
  'return dtype() == DType::f32 ? to_floats()[0] : float(to_ints()[0]);'
mutant "tensor: turning requires_grad off keeps the old gradient" "-ts=tensor" \
  't.grad.reset();' \
  '(void)0;'
# --- train/bucket_step.cpp ---
mutant "bucket step: the result sums read one slot early" "-ts=eval" \
  'for (int i = 0; i < 7; ++i) out.sums[i] = v[i + 1];' \
  'for (int i = 0; i < 7; ++i) out.sums[i] = v[i];'
mutant "bucket step: the partial-recompute cost counts anchors, not draft rows" "-ts=bucket-step,checkpoint" \
  'return dflash::partial_recompute_cost(drafter_.spec(), bucket_.seq, bucket_.anchors * drafter_.spec().block_size);' \
  'return dflash::partial_recompute_cost(drafter_.spec(), bucket_.seq, bucket_.anchors);'
# --- train/bucket_step.h ---
mutant "step result: tau is NaN for a micro-batch without blocks" "-ts=bucket-step -tc=a?step?result*" \
  'double tau() const { return sums[5] > 0 ? sums[4] / sums[5] : 0.0; }' \
  'double tau() const { return sums[5] >= 0 ? sums[4] / sums[5] : 0.0; }'
# --- train/checkpoint.cpp ---
mutant "a step-05 folder counts as checkpoint step 5" "-tc=*only?canonical?step-N*" \
  '(digits.size() > 1 && digits[0] == '\''0'\'')) return std::nullopt;' \
  'false) return std::nullopt;'
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
mutant "checkpoint marker: a file grown after the save accepted when checksums are skipped" "-ts=checkpoint-io -tc=checkpoint?marker*" \
  '    if (bytes != want)' \
  '    if (bytes < want)'
mutant "checkpoint load: the v moments not held to the model's names and shapes" "-ts=checkpoint-io -tc=checkpoint?load*" \
  'check_tensors(moments, params, {"m.", "v."}, {"step"}, what);' \
  'check_tensors(moments, params, {"m."}, {"step"}, what);'
mutant "checkpoint save: a drafter spec of other shapes (same names) accepted for the store" "-ts=checkpoint-io -tc=checkpoint?save*" \
  'same = specs[i].name == params.specs()[i].name && specs[i].shape == params.specs()[i].shape;' \
  'same = specs[i].name == params.specs()[i].name;'
# --- train/cluster.cpp ---
mutant "cluster: a CPU build's refusal of a launched process names the launcher, not the rank" "-ts=launch -tc=the?refusal?of?a?launched*" \
  'return "this process is " + launch.describe() +' \
  'return "this process is " + launch.launcher +'
# --- train/commands.cpp ---
mutant "prepare ignores data.shards" "-ts=config-effects" \
  'fs::path root = cfg.data.shards.empty() ? cfg.job.dump_folder / "shards" : cfg.data.shards;' \
  'fs::path root = cfg.job.dump_folder / "shards";'
mutant "hidden under skip: a too-long sequence stored before the waiting group" "-tc=*hidden?under?data.overflow*" \
  'if (rows[size_t(i)] == 0) {  // skipped by the overflow policy: stored empty' \
  'if (rows[size_t(i)] == 0) { writer->append(nullptr, 0); continue; } if (false) {'
mutant "export: --dtype f32 writes bf16" "-ts=export" \
  'export_checkpoint(checkpoint, out, dtype == "f32" ? DType::f32 : DType::bf16);' \
  'export_checkpoint(checkpoint, out, DType::bf16);'
mutant "folder lock: prepare takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'const std::optional<FolderLock> lock = lock_dump_folder(cfg.job.dump_folder, nullptr);' \
  ''
mutant "folder lock: hidden takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'const std::optional<FolderLock> lock = lock_dump_folder(cfg.job.dump_folder, &coord);' \
  ''
mutant "folder lock: export takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'const FolderLock lock = FolderLock::acquire(export_lock_file(out), out, "choose another --out");' \
  ''
mutant "export: a non-empty --out replaced without --overwrite" "-ts=refused-writes -tc=export?onto*" \
  'DF_CHECK(overwrite || !fs::is_directory(out, ec) || fs::is_empty(out, ec),' \
  'DF_CHECK(true,'
# --- train/config.cpp ---
mutant "config: a fraction key's upper end, open or closed, ignored" "-ts=config*" \
  'require(v >= 0 && (closed ? v <= 1 : v < 1), key,' \
  'require(v >= 0 && v <= 1, key,'
mutant "config: synthetic min_length equal to prompt_length accepted" "-ts=config*" \
  'require(sd.min_length > sd.prompt_length,' \
  'require(sd.min_length >= sd.prompt_length,'
mutant "config: synthetic max_length equal to min_length refused" "-ts=config*" \
  'require(sd.max_length >= sd.min_length,' \
  'require(sd.max_length > sd.min_length,'
mutant "config: runtime.kernels accepts any value" "-ts=config*" \
  'require(c.runtime.kernels == "auto" || c.runtime.kernels == "portable", "runtime.kernels",' \
  'require(true, "runtime.kernels",'
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
mutant "key buckets.seq ignored (every bucket 512 long)" "-ts=config" \
  'cfg_.buckets.push_back(b);' \
  'b.seq = 512; cfg_.buckets.push_back(b);'
mutant "key buckets.anchors ignored (16 anchors per sequence)" "-ts=config" \
  'cfg_.buckets.push_back(b);' \
  'b.anchors = 16; cfg_.buckets.push_back(b);'
mutant "key buckets.batch ignored (one sequence per micro-batch)" "-ts=config" \
  'cfg_.buckets.push_back(b);' \
  'b.batch = 1; cfg_.buckets.push_back(b);'
# --- train/config.h ---
mutant "config: runtime.heartbeat_timeout_s defaults to 3 s" "-ts=config -tc=absent?keys*" \
  'double heartbeat_timeout_s = 30;      // a rank silent this long counts as hung' \
  'double heartbeat_timeout_s = 3;      // a rank silent this long counts as hung'
mutant "config: training.beta1 defaults to 0.99" "-ts=config -tc=absent?keys*" \
  'double beta1 = 0.9, beta2 = 0.95' \
  'double beta1 = 0.99, beta2 = 0.95'
# --- train/config_keys.cpp ---
mutant "config: a key two edits off gets no suggestion" "-ts=config" \
  'size_t best_d = 3;' \
  'size_t best_d = 2;'
mutant "config: a section's key list includes its subsections' keys" "-ts=config" \
  'std::string(f.key).find('\''.'\'', section.size() + 1) == std::string::npos' \
  'true'
mutant "config keys: a key's leaf taken after its first dot, not its last" "-ts=config -tc=config?keys*" \
  'std::string leaf_of(const std::string& key) { return key.substr(key.rfind('\''.'\'') + 1); }' \
  'std::string leaf_of(const std::string& key) { return key.substr(key.find('\''.'\'') + 1); }'
mutant "config keys: a substitution counted as two edits (two typos no longer suggested)" "-ts=config -tc=config?keys*" \
  'diag + (a[i - 1] == b[j - 1] ? 0 : 1)' \
  'diag + (a[i - 1] == b[j - 1] ? 0 : 2)'
mutant "config keys: a 10-character fixed number printed in scientific notation" "-ts=config -tc=config?keys*" \
  'if (fixed.size() <= 10) return fixed;' \
  'if (fixed.size() < 10) return fixed;'
# --- train/data_fingerprint.cpp ---
mutant "fingerprint: XXH64's fourth lane reads the third's bytes" "-ts=data-fingerprint -tc=Hash64*" \
  'v3 = round64(v3, read64(p + 24));' \
  'v3 = round64(v3, read64(p + 16));'
mutant "fingerprint: the cache ignores the mtime" "-ts=data-fingerprint -tc=a?JSONL?file*" \
  'files[key].value("mtime_ns", int64_t(-1)) == mtime && files[key].contains("xxh64"))' \
  'files[key].contains("xxh64"))'
mutant "fingerprint: the cache never answers" "-ts=data-fingerprint -tc=a?JSONL?file*" \
  'if (files.contains(key) && files[key].value("bytes", int64_t(-1)) == int64_t(st.st_size) &&' \
  'if (false && files[key].value("bytes", int64_t(-1)) == int64_t(st.st_size) &&'
mutant "fingerprint: other content at the same size not seen" "-ts=data-fingerprint -tc=a?JSONL?file*,resume*" \
  '  if (files.empty()) return "";' \
  '  return "";'
mutant "fingerprint: a shard directory hashes index.json only" "-ts=data-fingerprint -tc=a?token-shard*" \
  'if (e.is_regular_file() && (n == "index.json" || shard)) names.push_back(n);' \
  'if (e.is_regular_file() && n == "index.json") names.push_back(n);'
mutant "fingerprint: changed data resumed without data.allow_changed" "-ts=data-fingerprint -tc=resume*" \
  'DF_CHECK(cfg.data.allow_changed,' \
  'DF_CHECK(true,'
mutant "fingerprint: data.allow_changed keeps the old data position" "-ts=data-fingerprint -tc=resume*" \
  'changed = changed || std::string(key) == "data.train";' \
  'changed = changed && std::string(key) == "data.train";'
mutant "key data.allow_changed ignored (changed data always refused)" "-ts=data-fingerprint" \
  'DF_CHECK(cfg.data.allow_changed,' \
  'DF_CHECK(false,'
# --- train/eval.cpp ---
mutant "eval anchors taken from the untruncated sequence" "-tc=*eval?under?data.overflow*" \
  '    Sequence s = truncate_sequence(data.get(i), len);' \
  '    Sequence s = data.get(i);'
mutant "eval: a too-long sequence skipped but not counted" "-tc=*eval?under?data.overflow*" \
  '        ++r.skipped;' \
  '        (void)0;'
mutant "eval: sequences counted once per anchor pass" "-tc=*eval?under?data.overflow*" \
  '    ++r.sequences;' \
  '    r.sequences += int64_t(passes.size());'
mutant "eval progress: a bucket's last partial micro-batch left out of the total" "-tc=*eval?s?progress*" \
  'for (size_t b = 0; b < buckets.size(); ++b) total += (int64_t(rows[b].size()) + buckets[b].batch - 1) / buckets[b].batch;' \
  'for (size_t b = 0; b < buckets.size(); ++b) total += int64_t(rows[b].size()) / buckets[b].batch;'
# --- train/export.cpp ---
mutant "export --dtype bf16 writes f32 anyway" "-tc=*SGLang?format*" \
  'export_drafter(out_dir, d.spec, store, dtype);' \
  'export_drafter(out_dir, d.spec, store, DType::f32);'
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
mutant "export: is_causal written true" "-ts=export" \
  'c["is_causal"] = false;' \
  'c["is_causal"] = true;'
mutant "export: auto_map names another file" "-ts=export" \
  'c["auto_map"] = {{"AutoModel", std::string("modeling_dflash.") + kArchitecture}};' \
  'c["auto_map"] = {{"AutoModel", std::string("modeling.") + kArchitecture}};'
# --- train/folder_lock.cpp ---
mutant "folder lock: a held lock not refused" "-ts=folder-lock -tc=a?second?lock*" \
  'if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {' \
  'if (false) {'
mutant "folder lock: a holder refused as a file system without locks" "-ts=folder-lock -tc=a?second?lock*" \
  'if (err == EWOULDBLOCK) DF_FAIL(' \
  'if (err == EINTR) DF_FAIL('
mutant "folder lock: the lock file left behind on release" "-ts=folder-lock -tc=a?second?lock*" \
  '  ::unlink(file_.c_str());' \
  ''
mutant "folder lock: the holder's text not written" "-ts=folder-lock -tc=a?lock?file?left*" \
  'if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == ssize_t(text.size())) ::fsync(fd);' \
  '(void)text;'
mutant "folder lock: a holder without text named as pid ''" "-ts=folder-lock -tc=a?lock?file?that*" \
  'if (pid.empty()) return "another process ("' \
  'if (false) return "another process ("'
mutant "folder lock: every rank of a run takes the lock" "-ts=folder-lock -tc=rank?0?takes*" \
  'const bool root = !coord || coord->rank() == 0;' \
  'const bool root = true;'
mutant "folder lock: rank 0's refusal not sent to the other ranks" "-ts=folder-lock -tc=rank?0?takes*" \
  'if (coord && coord->size() > 1) refusal = coord->broadcast(refusal);' \
  ''
# --- train/generate_command.cpp ---
mutant "key generate.max_length ignored (the longest prompt + max_new_tokens)" "-ts=generate -tc=a?prompt?beyond*" \
  'const int64_t capacity = g.max_length > 0 ? g.max_length : longest + g.max_new_tokens;' \
  'const int64_t capacity = longest + g.max_new_tokens;'
mutant "generate resume: the ids already written generated again" "-ts=generate -tc=a?rerun*" \
  'if (done.count(prompts[i].key)) ++sum.skipped;' \
  'if (false) ++sum.skipped;'
mutant "generate ranks: a rank takes every prompt from its rank on, not every world-th" "-ts=generate -tc=the?same?output?file*" \
  'for (size_t i = size_t(rank); i < prompts.size(); i += size_t(world)) {' \
  'for (size_t i = size_t(rank); i < prompts.size(); ++i) {'
mutant "key generate.batch ignored (32 slots)" "-ts=config-keys -tc=generate.batch*" \
  'const int64_t slots = g.batch;' \
  'const int64_t slots = 32;'
mutant "key generate.prefill_chunk ignored (256 rows)" "-ts=config-keys -tc=generate.batch*" \
  'opt.prefill_chunk = g.prefill_chunk;' \
  'opt.prefill_chunk = 256;'
mutant "key generate.temperature ignored (greedy)" "-ts=config-keys -tc=?generate]*" \
  'opt.temperature = float(g.temperature);' \
  'opt.temperature = 0.0f;'
mutant "key generate.top_p ignored (1)" "-ts=config-keys -tc=?generate]*" \
  'opt.top_p = float(g.top_p);' \
  'opt.top_p = 1.0f;'
mutant "key generate.top_k ignored (0)" "-ts=config-keys -tc=?generate]*" \
  'opt.top_k = g.top_k;' \
  'opt.top_k = 0;'
mutant "key generate.max_new_tokens ignored by the requests (2048)" "-ts=config-keys -tc=?generate]*" \
  'requests.push_back({p->ids, g.max_new_tokens, generate_sample_key(g.seed, p->key)});' \
  'requests.push_back({p->ids, 2048, generate_sample_key(g.seed, p->key)});'
mutant "key generate.seed ignored (seed 0)" "-ts=config-keys -tc=?generate]*" \
  'requests.push_back({p->ids, g.max_new_tokens, generate_sample_key(g.seed, p->key)});' \
  'requests.push_back({p->ids, g.max_new_tokens, generate_sample_key(0, p->key)});'
mutant "key generate.seed: job.seed in its place" "-ts=config-keys -tc=?generate]*" \
  'requests.push_back({p->ids, g.max_new_tokens, generate_sample_key(g.seed, p->key)});' \
  'requests.push_back({p->ids, g.max_new_tokens, generate_sample_key(cfg.job.seed, p->key)});'
mutant "key generate.progress_every_s ignored (10 s)" "-ts=config-keys -tc=generate.batch*" \
  '< g.progress_every_s) return;' \
  '< 10.0) return;'
# --- train/generate_output.cpp ---
mutant "generate resume: an output of other settings continued (its header not compared)" "-ts=generate -tc=an?output?made*" \
  'if (!diff.empty()) {' \
  'if (false) {'
mutant "generate resume: a torn last line left in place" "-ts=generate -tc=a?rerun*" \
  'if (repair) {' \
  'if (false) {'
mutant "generate merge: the parts merged before every prompt has a record" "-ts=generate -tc=the?same?output?file*" \
  'if (have < int64_t(prompts.size())) return false;' \
  'if (false) return false;'
# --- train/job.cpp ---
mutant "memory_limit_gb not split among CPU workers" "-ts=config-effects" \
  '    bytes /= job.devices.size();' \
  '    bytes /= 1;'
mutant "drafter.rope_theta ignored" "-ts=config-effects" \
  's.rope_theta = d.rope_theta > 0 ? d.rope_theta : t.rope_theta;' \
  's.rope_theta = t.rope_theta;'
mutant "job: drafter.intermediate_size ignored" "-ts=bad-input-resume" \
  's.intermediate_size = d.intermediate_size ? d.intermediate_size : t.intermediate_size;' \
  's.intermediate_size = t.intermediate_size;'
mutant "job: synthetic eval data generated from the training seed" "-ts=trainer" \
  'uint64_t seed = eval ? syn.seed + 1000003 : syn.seed;' \
  'uint64_t seed = syn.seed;'
mutant "key runtime.kernels ignored (auto)" "-ts=kernel-paths" \
  'set_kernel_paths(parse_kernel_paths(cfg.runtime.kernels));' \
  'set_kernel_paths(parse_kernel_paths("auto"));'
mutant "key runtime.devices ignored (auto)" "-ts=config-keys" \
  'const std::string& d = rt.devices;' \
  'const std::string d = "auto";'
mutant "key runtime.cpu_workers ignored (one worker)" "-ts=config-effects" \
  'for (int64_t i = 0; i < rt.cpu_workers; ++i) out.push_back(Device::cpu(int(i)));' \
  'for (int64_t i = 0; i < 1; ++i) out.push_back(Device::cpu(int(i)));'
mutant "key drafter.num_hidden_layers ignored (1 layer)" "-ts=config-keys" \
  's.num_hidden_layers = d.num_hidden_layers;' \
  's.num_hidden_layers = 1;'
mutant "key drafter.num_attention_heads ignored (the target's)" "-ts=config-keys" \
  's.num_attention_heads = d.num_attention_heads ? d.num_attention_heads : t.num_attention_heads;' \
  's.num_attention_heads = t.num_attention_heads;'
mutant "key drafter.num_key_value_heads ignored (the target's)" "-ts=config-keys" \
  's.num_key_value_heads = d.num_key_value_heads ? d.num_key_value_heads : t.num_key_value_heads;' \
  's.num_key_value_heads = t.num_key_value_heads;'
mutant "key drafter.head_dim ignored (the target's)" "-ts=config-keys" \
  's.head_dim = d.head_dim ? d.head_dim : t.head_dim;' \
  's.head_dim = t.head_dim;'
mutant "key drafter.rms_norm_eps ignored (1e-6)" "-ts=config-keys" \
  's.rms_norm_eps = d.rms_norm_eps;' \
  's.rms_norm_eps = 1e-6;'
mutant "key drafter.block_size ignored (16)" "-ts=config-keys -tc=drafter.block_size*" \
  's.block_size = d.block_size;' \
  's.block_size = 16;'
mutant "key drafter.mask_token_id ignored (token 0)" "-ts=config-keys" \
  's.mask_token_id = *d.mask_token_id;' \
  's.mask_token_id = 0;'
mutant "key target.layer_ids ignored (the default layers)" "-ts=config-keys" \
  's.target_layer_ids = cfg.target.layer_ids.empty() ?' \
  's.target_layer_ids = true ?'
mutant "key drafter.loss_decay_gamma ignored (7)" "-ts=config-keys" \
  's.loss_decay_gamma = d.loss_decay_gamma;' \
  's.loss_decay_gamma = 7.0;'
mutant "key target.synthetic.enabled ignored (no target written)" "-ts=config-keys" \
  'if (cfg.target.synthetic.enabled && !fs::exists(tdir / "config.json")) {' \
  'if (false && !fs::exists(tdir / "config.json")) {'
mutant "key target.synthetic.architecture ignored (qwen3)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.architecture = "qwen3"; return s; }());'
mutant "key target.synthetic.vocab_size ignored (256)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.vocab_size = 256; return s; }());'
mutant "key target.synthetic.hidden_size ignored (64)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.hidden_size = 64; return s; }());'
mutant "key target.synthetic.intermediate_size ignored (128)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.intermediate_size = 128; return s; }());'
mutant "key target.synthetic.num_hidden_layers ignored (4)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.num_hidden_layers = 4; return s; }());'
mutant "key target.synthetic.num_attention_heads ignored (4)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.num_attention_heads = 4; return s; }());'
mutant "key target.synthetic.num_key_value_heads ignored (2)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.num_key_value_heads = 2; return s; }());'
mutant "key target.synthetic.head_dim ignored (16)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.head_dim = 16; return s; }());'
mutant "key target.synthetic.rope_theta ignored (10000)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.rope_theta = 10000.0; return s; }());'
mutant "key target.synthetic.init_std ignored (0.02)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.init_std = 0.02; return s; }());'
mutant "key target.synthetic.seed ignored (seed 0)" "-ts=config-keys" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.seed = 0; return s; }());'
mutant "key target.synthetic.seed: job.seed in its place" "-ts=config-keys -tc=target.synthetic.seed*" \
  'write_random_target(tdir, cfg.target.synthetic);' \
  'write_random_target(tdir, [&] { SyntheticTargetConfig s = cfg.target.synthetic; s.seed = cfg.job.seed; return s; }());'
mutant "key data.synthetic.enabled ignored (no data generated)" "-ts=config-keys" \
  'if (syn.enabled && !fs::exists(path)) {' \
  'if (false && !fs::exists(path)) {'
mutant "key data.synthetic.train_sequences ignored (256)" "-ts=config-keys" \
  'int64_t count = eval ? syn.eval_sequences : syn.train_sequences;' \
  'int64_t count = eval ? syn.eval_sequences : 256;'
mutant "key data.synthetic.eval_sequences ignored (32)" "-ts=config-keys" \
  'int64_t count = eval ? syn.eval_sequences : syn.train_sequences;' \
  'int64_t count = eval ? 32 : syn.train_sequences;'
mutant "key data.synthetic.seed ignored (seed 1)" "-ts=config-keys" \
  'uint64_t seed = eval ? syn.seed + 1000003 : syn.seed;' \
  'uint64_t seed = eval ? 1 + 1000003 : 1;'
mutant "key data.synthetic.seed: job.seed in its place" "-ts=config-keys -tc=data.synthetic.seed*" \
  'uint64_t seed = eval ? syn.seed + 1000003 : syn.seed;' \
  'uint64_t seed = eval ? job.cfg.job.seed + 1000003 : job.cfg.job.seed;'
mutant "key data.synthetic.prompt_length ignored (8)" "-ts=config-keys" \
  'std::vector<Sequence> seqs = generate_from_target(target, syn, count, seed, job.drafter.mask_token_id);' \
  'std::vector<Sequence> seqs = generate_from_target(target, [&] { SyntheticDataConfig s = syn; s.prompt_length = 8; return s; }(), count, seed, job.drafter.mask_token_id);'
mutant "key data.synthetic.min_length ignored (24)" "-ts=config-keys" \
  'std::vector<Sequence> seqs = generate_from_target(target, syn, count, seed, job.drafter.mask_token_id);' \
  'std::vector<Sequence> seqs = generate_from_target(target, [&] { SyntheticDataConfig s = syn; s.min_length = 24; return s; }(), count, seed, job.drafter.mask_token_id);'
mutant "key data.synthetic.max_length ignored (64)" "-ts=config-keys" \
  'std::vector<Sequence> seqs = generate_from_target(target, syn, count, seed, job.drafter.mask_token_id);' \
  'std::vector<Sequence> seqs = generate_from_target(target, [&] { SyntheticDataConfig s = syn; s.max_length = 64; return s; }(), count, seed, job.drafter.mask_token_id);'
mutant "key data.train ignored (the eval data trained on)" "-ts=config-keys -tc=job.name*" \
  'return open_or_generate(job, job.cfg.data.train, false, log);' \
  'return open_or_generate(job, job.cfg.data.eval, false, log);'
mutant "key runtime.memory_limit_gb ignored (the free memory)" "-ts=config-effects" \
  'if (rt.memory_limit_gb > 0) {' \
  'if (false) {'
mutant "key data.eval ignored (no eval set)" "-ts=config-effects" \
  'if (job.cfg.data.eval.empty()) return nullptr;' \
  'if (true) return nullptr;'
# --- train/memory_fit.cpp ---
mutant "memory fit: tied embeddings counted twice" "-ts=bad-input-memory" \
  'product({t.tie_word_embeddings ? 1 : 2, t.vocab_size, H})' \
  'product({2, t.vocab_size, H})'
mutant "memory fit: an exact fit refused" "-ts=bad-input-memory" \
  'if (need.total && *need.total <= available) return;' \
  'if (need.total && *need.total < available) return;'
mutant "memory fit: Adam moments left out of a training worker's need" "-ts=bad-input-memory" \
  '(w.train ? 8 : 0)' \
  '(w.train ? 0 : 0)'
# --- train/replica.cpp ---
mutant "the trainer's update leaves gradients unzeroed with several micro-batches" "-ts=trainer-reference" \
  'const bool fresh_grads = o.train && o.grad_accum == 1;' \
  'const bool fresh_grads = o.train;'
mutant "replica: the target program not recorded for hidden features" "-ts=trainer" \
  'if (step->online() && (opt_.train || opt_.features))' \
  'if (step->online() && opt_.train)'
mutant "replica: the update scales gradients as if each step had one micro-batch" "-ts=trainer-reference" \
  'u.micro_batches = int(o.grad_accum);' \
  'u.micro_batches = 1;'
mutant "replica: the bucket steps write fresh gradients even with several micro-batches" "-ts=trainer-reference" \
  'steps_.back()->set_fresh_grads(fresh_grads);' \
  'steps_.back()->set_fresh_grads(o.train);'
# --- train/run_identity.cpp ---
mutant "resume identity: the embedding's checksum not recorded" "-ts=bad-input-resume" \
  'j["target.embed_tokens.crc32"] = sums.embed_tokens;' \
  '(void)sums.embed_tokens;'
mutant "resume identity: llama3 rope factors not recorded" "-ts=bad-input-resume" \
  'if (t.rope_type == RopeType::llama3) {' \
  'if (false) {'
# --- train/sharded_checkpoint.cpp ---
mutant "a plain checkpoint resumed into a sharded run swaps Adam m and v" "-tc=*plain?checkpoint?resumes?into?a?sharded*" \
  'else copy(moments_->bytes(kind + "." + p.name), p.offset, p.count);' \
  'else copy(moments_->bytes((kind == "m" ? std::string("v") : std::string("m")) + "." + p.name), p.offset, p.count);'
mutant "sharded checkpoint: the manifest's version not checked" "-tc=a?damaged?sharded?checkpoint*" \
  'DF_CHECK(m.at("format") == kManifestFormat && m.at("version") == kManifestVersion,' \
  'DF_CHECK(m.at("format") == kManifestFormat,'
mutant "sharded checkpoint: a shard's tensors not held to the manifest's count" "-tc=a?damaged?sharded?checkpoint*" \
  'sh.file->info(kind).dtype == "F32" && sh.file->info(kind).numel() == sh.count,' \
  'sh.file->info(kind).dtype == "F32",'
mutant "sharded checkpoint: every shard's begin written as rank 0's (the manifest's ranges overlap)" "-ts=sharded-checkpoint -tc=sharded?checkpoint*" \
  '{"begin", int64_t(r) * params.shard_numel()},' \
  '{"begin", params.shard_begin()},'
mutant "sharded checkpoint: a rank whose optimizer is at another step saved under this step" "-ts=sharded-checkpoint -tc=sharded?checkpoint*" \
  'DF_CHECK(counter == step, "rank " << s.rank << " has done " << counter << " optimizer steps, not " << step);' \
  'DF_CHECK(counter >= step, "rank " << s.rank << " has done " << counter << " optimizer steps, not " << step);'
mutant "sharded checkpoint: a save missing a rank's shard completed (the shard count not checked)" "-ts=sharded-checkpoint -tc=sharded?checkpoint*" \
  'DF_CHECK(int64_t(files.size()) == world, "expected " << world << " shard files, got " << files.size());' \
  'DF_CHECK(int64_t(files.size()) <= world, "expected " << world << " shard files, got " << files.size());'
# --- train/spec_command.cpp ---
mutant "spec: --max-new-tokens ignored for the config's" "-ts=spec" \
  'const int64_t max_new = o.max_new_tokens.value_or(cfg.eval.spec_max_new_tokens);' \
  'const int64_t max_new = cfg.eval.spec_max_new_tokens;'
mutant "spec: the note that the drafter's block size wins printed only when the two agree" "-ts=spec" \
  'if (spec.block_size != cfg.drafter.block_size)' \
  'if (spec.block_size == cfg.drafter.block_size)'
mutant "key eval.spec_seed ignored by spec (seed 0)" "-ts=config-keys -tc=eval.spec_seed?picks*" \
  'measure_spec_prompt(decoder, prompts[i], max_new, stop, true, exact, spec_sample_key(cfg.eval.spec_seed, i)));' \
  'measure_spec_prompt(decoder, prompts[i], max_new, stop, true, exact, spec_sample_key(0, i)));'
mutant "key eval.spec_seed: job.seed in its place in spec" "-ts=config-keys -tc=eval.spec_seed?picks*" \
  'measure_spec_prompt(decoder, prompts[i], max_new, stop, true, exact, spec_sample_key(cfg.eval.spec_seed, i)));' \
  'measure_spec_prompt(decoder, prompts[i], max_new, stop, true, exact, spec_sample_key(cfg.job.seed, i)));'
# --- train/spec_eval.cpp ---
mutant "the lossless check reports the margin one new token late" "-tc=*lossless?check?names*" \
  'const size_t k = i - p.ids.size();' \
  'const size_t k = i - p.ids.size() + 1;'
mutant "spec figures: TPOT not divided by the prompt's new tokens" "-tc=*summarize_spec:?tokens/s*" \
  'tpot_spec += r.spec_s / tokens;' \
  'tpot_spec += r.spec_s;'
mutant "spec figures: a round that accepts the whole block left out of the histogram" "-ts=spec*" \
  'if (a >= 1 && a <= block_size) ++f.histogram[size_t(a - 1)];' \
  'if (a >= 1 && a < block_size) ++f.histogram[size_t(a - 1)];'
mutant "spec prompts: a data sequence trained on from its first token gives an empty prompt" "-ts=spec -tc=spec*" \
  'if (first == s.loss_mask.end() || cut == 0) {' \
  'if (first == s.loss_mask.end()) {'
mutant "spec stop ids: a stop id equal to the vocabulary size accepted" "-ts=spec -tc=spec*" \
  'DF_CHECK(id < vocab, "eval.spec_stop_token_ids holds "' \
  'DF_CHECK(id <= vocab, "eval.spec_stop_token_ids holds "'
mutant "spec figures: a prompt without rounds counted in the macro tau" "-ts=spec -tc=summarize_spec*" \
  '  f.tau = with_rounds ? tau_sum / double(with_rounds) : 0.0;' \
  '  f.tau = f.prompts ? tau_sum / double(f.prompts) : 0.0;'
mutant "spec --output: finish says length after a stop token" "-ts=spec -tc=*--output*" \
  '{"finish", stopped ? "stop" : "length"},' \
  '{"finish", "length"},'
mutant "spec --output: the completion holds the prompt too" "-ts=spec -tc=*--output*" \
  'const std::vector<int32_t> completion(r.output.begin() + r.prompt_tokens, r.output.end());' \
  'const std::vector<int32_t> completion(r.output.begin(), r.output.end());'
mutant "sampling: every prompt draws the same stream" "-ts=spec-sampling -tc=*chi-square*" \
  'return splitmix64(splitmix64(seed) ^ uint64_t(prompt_index));' \
  'return splitmix64(seed);'
mutant "key eval.spec_ignore_eos ignored" "-ts=spec" \
  'if (eval.spec_ignore_eos) {' \
  'if (false) {'
mutant "key eval.spec_stop_token_ids ignored (the target's eos)" "-ts=spec" \
  'if (!eval.spec_stop_token_ids.empty()) {' \
  'if (false) {'
mutant "key eval.spec_temperature ignored (greedy)" "-ts=config-keys" \
  'options.temperature = float(eval.spec_temperature);' \
  'options.temperature = 0.0f;'
mutant "key eval.spec_top_p ignored (1)" "-ts=config-keys" \
  'options.top_p = float(eval.spec_top_p);' \
  'options.top_p = 1.0f;'
mutant "key eval.spec_top_k ignored (0)" "-ts=config-keys" \
  'options.top_k = eval.spec_top_k;' \
  'options.top_k = 0;'
# --- train/spec_monitor.cpp ---
mutant "spec monitor: the decoders' capacity leaves out the new tokens" "-ts=spec" \
  'o.max_len = longest + max_new_;' \
  'o.max_len = longest;'
mutant "key eval.spec_max_new_tokens ignored in training (128)" "-ts=spec" \
  'max_new_ = e.spec_max_new_tokens;' \
  'max_new_ = 128;'
mutant "key eval.spec_seed: job.seed in its place in training" "-ts=config-keys" \
  'seed_ = e.spec_seed;' \
  'seed_ = cfg.job.seed;'
# --- train/step_record.cpp ---
mutant "logged step loss divided by k*W - 1, not k*W" "-ts=trainer-reference" \
  'r.loss /= n;' \
  'r.loss /= std::max(1.0, n - 1);'
mutant "logged accuracy divided by k*W - 1, not k*W" "-ts=trainer-reference" \
  'r.accuracy /= n;' \
  'r.accuracy /= std::max(1.0, n - 1);'
# --- train/trackers.cpp ---
mutant "trackers: a run that starts over continues the old tracker runs" "-ts=trackers" \
  '  if (options.restart) {' \
  '  if (false) {'
mutant "key metrics.trackers ignored (no follower)" "-ts=trackers" \
  'if (cfg.metrics.trackers.empty()) return nullptr;' \
  'if (true) return nullptr;'
# --- train/train_log.cpp ---
mutant "format_duration: an hour shown as 60m00s" "-ts=trainer" \
  'else if (s < 3600)' \
  'else if (s <= 3600)'
mutant "metrics.jsonl: tokens_per_s holds the step's tokens" "-ts=trainer" \
  '{"tokens_per_s", tokens_per_s}' \
  '{"tokens_per_s", tokens}'
mutant "metrics: a short write taken as written" "-ts=metrics-log -tc=a?metrics?write?that?fails*" \
  'if (n == long(line.size())) return;' \
  'if (n != 0) return;'
mutant "metrics: resume keeps the records past the checkpoint's step" "-ts=metrics-log -tc=resume_at*,a?torn*" \
  'if (j.is_null() || j["step"].get<int64_t>() > step) break;' \
  'if (j.is_null()) break;'
mutant "metrics: resume never cuts the file" "-ts=metrics-log -tc=resume_at*,a?torn*" \
  '  if (keep < text.size()) {' \
  '  if (false) {'
mutant "metrics: checkpoint.resume = false appends to an existing file" "-ts=metrics-log -tc=checkpoint.resume*" \
  'if (fresh && ::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)' \
  'if (false)'
# --- train/trainer.cpp ---
mutant "logged tokens: only the last micro-batch's" "-ts=trainer-reference" \
  'slot.tokens = fill_batch(seqs, bucket, job_.drafter.block_size, rng,' \
  'slot.tokens = (j + 1 < c.training.grad_accum ? 0 : 1) * fill_batch(seqs, bucket, job_.drafter.block_size, rng,'
mutant "every micro-batch samples its anchors from the same seed" "-ts=trainer-reference" \
  'std::mt19937_64 rng(mb.anchor_seed(c.job.seed));' \
  'std::mt19937_64 rng(c.job.seed);'
mutant "rank check after the all-reduce removed" "-tc=*disagree*" \
  'DF_CHECK(std::memcmp(stats_[w].data(), stats_[0].data(), sizeof(float) * 2) == 0 || std::isnan(stats_[0][0]),' \
  'DF_CHECK(true || std::isnan(stats_[0][0]),'
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
mutant "metrics: a failed write does not stop the run" "-ts=metrics-log -tc=a?full?disk*" \
  'return g_stop_signal.load() != 0 || log_.failed() || (hooks_.stop_requested && hooks_.stop_requested());' \
  'return g_stop_signal.load() != 0 || (hooks_.stop_requested && hooks_.stop_requested());'
mutant "metrics: the checkpoint of a failed write drops the unwritten records" "-ts=metrics-log -tc=a?full?disk*" \
  'if (!log_.unwritten().empty()) state["metrics_unwritten"] = log_.unwritten();' \
  'if (false) state["metrics_unwritten"] = log_.unwritten();'
mutant "metrics: resume does not append the records its checkpoint kept" "-ts=metrics-log -tc=a?full?disk*" \
  'if (coord_->rank() == 0) resumed_unwritten_ = state.value("metrics_unwritten", std::vector<std::string>{});' \
  'if (false) resumed_unwritten_ = state.value("metrics_unwritten", std::vector<std::string>{});'
mutant "metrics: a measurement of the resumed step made again though written" "-ts=metrics-log -tc=a?torn*" \
  'return at == resumed_at && kept.find(std::string(" ") + kind + " ") != std::string::npos;' \
  'return at == resumed_at && kept.empty();'
mutant "metrics: an eval of the resumed step the stopped run had not written is not made" "-ts=metrics-log -tc=a?torn*" \
  'if (eval_ && root && step > 0 && step < total && c.training.eval_every > 0 && step % c.training.eval_every == 0 &&' \
  'if (eval_ && root && false && c.training.eval_every > 0 && step % c.training.eval_every == 0 &&'
mutant "metrics: the first step after a resume writes a record an uninterrupted run has not" "-ts=metrics-log -tc=a?torn*" \
  'const bool log_step = step % c.metrics.log_every == 0 || step == total || step == 1;' \
  'const bool log_step = step % c.metrics.log_every == 0 || step == total || step == first + 1;'
mutant "folder lock: training takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'lock = lock_dump_folder(cfg.job.dump_folder, cluster ? cluster->coord : pg ? &pg->coordinator() : nullptr);' \
  ''
mutant "key training.steps ignored (100)" "-ts=config-effects" \
  'const int64_t total = c.training.steps;' \
  'const int64_t total = 100;'
mutant "key metrics.log_every ignored (10)" "-ts=config-effects" \
  'const bool log_step = step % c.metrics.log_every == 0 || step == total || step == 1;' \
  'const bool log_step = step % 10 == 0 || step == total || step == 1;'
mutant "key training.eval_every ignored (0)" "-ts=config-effects" \
  'if (eval_ && root && c.training.eval_every > 0 && step % c.training.eval_every == 0 && step < total)' \
  'if (eval_ && root && false && step < total)'
mutant "key eval.spec_every ignored (0)" "-ts=spec" \
  'if (spec_ && c.eval.spec_every > 0 && step % c.eval.spec_every == 0 && step < total)' \
  'if (spec_ && false && step < total)'
mutant "key job.seed ignored by the anchors (seed 0)" "-ts=trainer-reference" \
  'std::mt19937_64 rng(mb.anchor_seed(c.job.seed));' \
  'std::mt19937_64 rng(mb.anchor_seed(0));'
mutant "key checkpoint.keep ignored (3)" "-ts=config-effects" \
  'prune_checkpoints(c.job.dump_folder, c.checkpoint.keep, &prune_warnings);' \
  'prune_checkpoints(c.job.dump_folder, 3, &prune_warnings);'
# --- train/trainer_startup.cpp ---
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
mutant "offline training ignores data.hidden" "-ts=config-effects" \
  'fs::path dir = c.data.hidden.empty() ? c.job.dump_folder / "hidden" : c.data.hidden;' \
  'fs::path dir = c.job.dump_folder / "hidden";'
mutant "runtime.arena_gb ignored" "-ts=config-effects" \
  'o.arena_budget = size_t(c.runtime.arena_gb * double(1ull << 30));' \
  'o.arena_budget = 0;'
mutant "the ranks' recorded programs are not compared" "-tc=ranks?whose?recorded?programs?differ*" \
  'coord_->check_same(program_signature(replicas_[0]->engine(), replicas_[0]->drafter().params()),' \
  'coord_->check_same(std::string(),'
mutant "fingerprint: the trainer records no fingerprint" "-ts=data-fingerprint -tc=resume*" \
  'if (root) data_fingerprint_ = job_data_fingerprints(c, info);' \
  'if (false) data_fingerprint_ = job_data_fingerprints(c, info);'
mutant "startup.json written before the resume is accepted" "-ts=refused-writes -tc=a?resume?refused*" \
  '    startup_report_ = report;  // written by run() once a resume is accepted' \
  '    startup_report_ = report; if (root) write_startup_json(c.job.dump_folder, report);'
mutant "key job.dump_folder ignored by the log (runs/dflash)" "-ts=config-effects" \
  'log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), cfg.job.dump_folder), cfg.metrics.progress,' \
  'log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), fs::path("runs/dflash")), cfg.metrics.progress,'
mutant "key metrics.progress ignored (a progress line on a terminal)" "-ts=config-keys" \
  'log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), cfg.job.dump_folder), cfg.metrics.progress,' \
  'log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), cfg.job.dump_folder), true,'
mutant "key job.name ignored in the log (dflash)" "-ts=config-keys" \
  'info("dflash-train: job '\''" + c.job.name + "'\'', dump folder "' \
  'info("dflash-train: job '\''" + std::string("dflash") + "'\'', dump folder "'
mutant "key runtime.overlap_reduction ignored by the startup note (CPU)" "-ts=config-keys" \
  '(c.runtime.overlap_reduction && cluster_.world > 1' \
  '(false && cluster_.world > 1'
mutant "key data.shuffle_seed ignored (seed 0)" "-ts=config-keys -tc=data.shuffle_seed*" \
  'c.data.shuffle_seed, train_->source().string(), screen.no_anchor);' \
  '0, train_->source().string(), screen.no_anchor);'
mutant "key data.shuffle_seed: job.seed in its place" "-ts=config-keys -tc=data.shuffle_seed*" \
  'c.data.shuffle_seed, train_->source().string(), screen.no_anchor);' \
  'c.job.seed, train_->source().string(), screen.no_anchor);'
mutant "key data.overflow ignored by the planner (truncate)" "-ts=config-keys" \
  '  parse_overflow_policy(c.data.overflow, "data.overflow"),' \
  '  OverflowPolicy::truncate,'
mutant "key data.mode ignored (online)" "-ts=spec" \
  'online_ = c.data.mode == "online";' \
  'online_ = true;'
mutant "key eval.spec_prompts ignored (no spec_tau)" "-ts=spec" \
  'if (!c.eval.spec_prompts.empty()) {' \
  'if (false) {'
mutant "key runtime.shard_optimizer ignored (unsharded)" "-ts=config-keys" \
  'const bool sharded = c.runtime.shard_optimizer && W > 1;' \
  'const bool sharded = false && W > 1;'
mutant "key training.lr ignored (6e-4)" "-ts=config-keys" \
  'opt.lr = float(c.training.lr);' \
  'opt.lr = 6e-4f;'
mutant "key training.beta1 ignored (0.9)" "-ts=config-keys" \
  'opt.beta1 = float(c.training.beta1);' \
  'opt.beta1 = 0.9f;'
mutant "key training.beta2 ignored (0.95)" "-ts=config-keys" \
  'opt.beta2 = float(c.training.beta2);' \
  'opt.beta2 = 0.95f;'
mutant "key training.eps ignored (1e-8)" "-ts=config-keys" \
  'opt.eps = float(c.training.eps);' \
  'opt.eps = 1e-8f;'
mutant "key training.weight_decay ignored (0.01)" "-ts=config-keys" \
  'opt.weight_decay = float(c.training.weight_decay);' \
  'opt.weight_decay = 0.01f;'
mutant "key training.max_grad_norm ignored (1)" "-ts=config-keys" \
  'opt.max_grad_norm = float(c.training.max_grad_norm);' \
  'opt.max_grad_norm = 1.0f;'
mutant "key training.grad_accum ignored (1)" "-ts=trainer-reference" \
  'const int64_t k = c.training.grad_accum;' \
  'const int64_t k = 1;'
mutant "key target.path ignored by the workers (no path)" "-ts=config-keys -tc=job.name*" \
  'o.target_dir = c.target.path;' \
  'o.target_dir = fs::path();'
mutant "key runtime.graphs ignored (recorded programs)" "-ts=config-keys" \
  'o.graphs = c.runtime.graphs;' \
  'o.graphs = true;'
mutant "key training.checkpointing ignored (on)" "-ts=config-keys" \
  'o.checkpointing = c.training.checkpointing;' \
  'o.checkpointing = true;'
mutant "key training.chunk_rows ignored (1024)" "-ts=config-keys" \
  'o.chunk_rows = c.training.chunk_rows;' \
  'o.chunk_rows = 1024;'
mutant "key job.seed ignored by the initialization (seed 0)" "-ts=config-keys" \
  'o.init_seed = c.job.seed;' \
  'o.init_seed = 0;'
mutant "key job.seed: data.shuffle_seed in its place for the initialization" "-ts=config-keys" \
  'o.init_seed = c.job.seed;' \
  'o.init_seed = c.data.shuffle_seed;'
mutant "key drafter.init_std ignored (0.02)" "-ts=config-keys" \
  'o.init_std = c.drafter.init_std;' \
  'o.init_std = 0.02;'
mutant "key drafter.init ignored (random init)" "-ts=trainer-reference" \
  'if (!c.drafter.init.empty()) {' \
  'if (false) {'

# Headers nearly every file includes: each rebuilds the whole CPU test binary twice (about 4 minutes
# on 2 cores), so they run only with scripts/mutants.sh --headers. Their tests run in every CI.
if [ "$with_headers" = 1 ]; then
  # --- runtime/allocator.h ---
  mutant "align_up: an exact multiple grows by a whole block" "-ts=tensor,replay" \
    'inline size_t align_up(size_t n, size_t a = kAlignment) { return (n + a - 1) / a * a; }' \
    'inline size_t align_up(size_t n, size_t a = kAlignment) { return (n + a) / a * a; }'
  # --- runtime/context.h ---
  mutant "context: a planning pass counts as not recording, so host copies are not refused there" "-ts=seal -tc=a?host?copy?inside*" \
    'bool recording() const { return mode_ != Mode::eager; }' \
    'bool recording() const { return mode_ == Mode::record; }'
  # --- runtime/dtype.h ---
  mutant "bf16: a NaN whose payload lies in the low half becomes infinity (quiet bit not set)" "-ts=tensor -tc=bf16?from?f32*" \
    'if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);' \
    'if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(u >> 16);'
  mutant "bf16: infinity converted as NaN" "-ts=tensor -tc=bf16?from?f32*" \
    'if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);' \
    'if ((u & 0x7fffffffu) >= 0x7f800000u) return uint16_t((u >> 16) | 0x40);'
  mutant "f16: a NaN read as infinity (its mantissa dropped)" "-ts=tensor -tc=f16?to?f32*" \
    'u = sign | 0x7f800000u | man << 13;' \
    'u = sign | 0x7f800000u;'
  # --- runtime/shape.h ---
  mutant "shape: shapes of different rank compare equal when one is a prefix of the other" "-ts=tensor -tc=shapes?of?different?rank*" \
    'if (ndim != o.ndim) return false;' \
    '(void)0;'
  # --- runtime/tensor.h ---
  mutant "tensor: data<T>() of another dtype not refused" "-ts=tensor" \
    'DF_CHECK(dtype() == dtype_of<T>::value, "data<"' \
    'DF_CHECK(true, "data<"'
fi
