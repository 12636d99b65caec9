# The CUDA kernels' mutants (scripts/mutants.sh --gpu, sourced by it; run on a GPU host by
# `scripts/gpu-test.sh mutants`): each plants one bug in kernels/cuda/ that a GPU test must catch.
# Each snippet (OLD) must occur exactly once in the sources outside tests/, scripts/ and docs/.
# Hints (no spaces) name the GPU suite and cases expected to catch it; the one-GPU suites run when they pass.
# --- The fused optimizer (kernels/cuda/optimizer.cu) ---
mutant "GPU optimizer: warmup lr from step t, not t + 1" "-ts=gpu-optimizer -tc=fused*" \
  'lr = float(double(a.peak_lr) * double(t + 1) / double(a.warmup_steps));' \
  'lr = float(double(a.peak_lr) * double(t) / double(a.warmup_steps));'
mutant "GPU optimizer: the cosine's span one step too long" "-ts=gpu-optimizer -tc=fused*" \
  'double progress = span > 0 ? double(t - a.warmup_steps) / double(span) : 1.0;' \
  'double progress = span > 0 ? double(t - a.warmup_steps) / double(span + 1) : 1.0;'
mutant "GPU optimizer: weight decay as 1 + lr * wd" "-ts=gpu-optimizer -tc=fused*" \
  'a.partials[kDecay] = __fmaf_rn(-lr, a.weight_decay, 1.0f);' \
  'a.partials[kDecay] = __fmaf_rn(lr, a.weight_decay, 1.0f);'
mutant "GPU optimizer: second-moment bias correction from beta1" "-ts=gpu-optimizer -tc=fused*" \
  'const float bc2_sqrt = float(sqrt(1.0 - pow(double(a.beta2), tt)));' \
  'const float bc2_sqrt = float(sqrt(1.0 - pow(double(a.beta1), tt)));'
mutant "GPU optimizer: the norm pass reads each pair's first pack twice" "-ts=gpu-optimizer -tc=fused*" \
  'const float4 a = g4[k], b = g4[k + kNormStride];' \
  'const float4 a = g4[k], b = g4[k];'
mutant "GPU optimizer: the AdamW tail starts one element late" "-ts=gpu-optimizer -tc=fused*" \
  'for (int64_t i = packs * 4 + first; i < a.n; i += stride) {' \
  'for (int64_t i = packs * 4 + first + 1; i < a.n; i += stride) {'
mutant "GPU optimizer: the packed bf16 copy's halves swapped" "-ts=gpu-optimizer -tc=fused*" \
  'if (bf) reinterpret_cast<uint2*>(bf)[k] = make_uint2(pack_bf16x2(p.x, p.y), pack_bf16x2(p.z, p.w));' \
  'if (bf) reinterpret_cast<uint2*>(bf)[k] = make_uint2(pack_bf16x2(p.z, p.w), pack_bf16x2(p.x, p.y));'
mutant "GPU optimizer: packed gradients never zeroed" "-ts=gpu-optimizer -tc=fused*" \
  'if (a.zero_grads) reinterpret_cast<float4*>(a.g)[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);' \
  'if (a.zero_grads && k < 0) reinterpret_cast<float4*>(a.g)[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);'
mutant "GPU GEMM: f32 inputs on TF32 tensor cores" "-ts=gpu-optimizer -tc=GEMM*" \
  'return g.ab_bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;' \
  'return g.ab_bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;'
# --- Norms, RoPE, SwiGLU, embedding ---
mutant "GPU rmsnorm (looping rows): the weight ignored" "-ts=gpu-kernels,gpu-ops -tc=*rmsnorm*" \
  'o.v[k] = from_float<T>(to_float(v.v[k]) * s * to_float(wv.v[k]));' \
  'o.v[k] = from_float<T>(to_float(v.v[k]) * s);'
mutant "GPU rmsnorm backward: dx's coefficient s^2 dot / D, not s^3" "-ts=gpu-kernels,gpu-ops -tc=*rmsnorm*" \
  'return __fdiv_rn(__fmul_rn(__fmul_rn(__fmul_rn(s, s), s), dot), float(D));' \
  'return __fdiv_rn(__fmul_rn(__fmul_rn(s, s), dot), float(D));'
mutant "GPU rmsnorm backward: dw's partials skip the last row of each run" "-ts=gpu-kernels,gpu-ops -tc=*rmsnorm*" \
  'for (int64_t r = r0; r < r1; ++r) acc = dw_term(' \
  'for (int64_t r = r0; r < r1 - 1; ++r) acc = dw_term('
mutant "GPU rope: sin and cos swapped" "-ts=gpu-kernels,gpu-ops -tc=rope*" \
  'for (int j = 0; j < U; ++j) sincosf(pos * inv_freq[q * U + j], &rot[j].sn, &rot[j].cs);' \
  'for (int j = 0; j < U; ++j) sincosf(pos * inv_freq[q * U + j], &rot[j].cs, &rot[j].sn);'
mutant "GPU rope backward: rotates by +angle, not -angle" "-ts=gpu-kernels,gpu-ops -tc=rope*" \
  'y1 = __fadd_rn(y1, __fmaf_rn(d1, cs, __fmul_rn(d2, sn)));' \
  'y1 = __fadd_rn(y1, __fmaf_rn(d1, cs, -__fmul_rn(d2, sn)));'
mutant "GPU fused rmsnorm_rope: cos and sin tables swapped" "-ts=gpu-ops -tc=fused*" \
  'sincosf(pos * a.inv_freq[i], &angles[half + i], &angles[i]);' \
  'sincosf(pos * a.inv_freq[i], &angles[i], &angles[half + i]);'
mutant "GPU swiglu: sigmoid of a negative gate taken as of its magnitude" "-ts=gpu-ops,gpu-kernels -tc=swiglu*" \
  'return v >= 0.0f ? r : e * r;' \
  'return v >= 0.0f ? r : r;'
mutant "GPU swiglu backward: dgate's factor 1 + g s, not 1 + g (1 - s)" "-ts=gpu-kernels,gpu-ops -tc=swiglu*" \
  'return __fadd_rn(acc, __fmul_rn(__fmul_rn(__fmul_rn(d, u), s), __fmaf_rn(g, __fsub_rn(1.0f, s), 1.0f)));' \
  'return __fadd_rn(acc, __fmul_rn(__fmul_rn(__fmul_rn(d, u), s), __fmaf_rn(g, s, 1.0f)));'
mutant "GPU embedding backward: a block also takes the next block's first row" "-ts=gpu-ops -tc=embedding*" \
  'if (row < 0 || row >= kIdsPerBlock) continue;' \
  'if (row < 0 || row > kIdsPerBlock) continue;'
# --- Cross-entropy, sums, metrics, casts, the batch ---
mutant "GPU cross-entropy: a running sum rescaled by exp(M - m)" "-ts=gpu-ops -tc=linear_cross_entropy*" \
  'return m == M ? s : s * expf(m - M); }' \
  'return m == M ? s : s * expf(M - m); }'
mutant "GPU cross-entropy: a NaN first logit no longer gives argmax 0" "-ts=gpu-ops -tc=*NaN*" \
  'if (isnan(to_float(x[0])) || st.best == V) st.best = 0;' \
  'if (st.best == V) st.best = 0;'
mutant "GPU sum: the scale (mean's 1/n) dropped" "-ts=gpu-ops -tc=sum*" \
  'if (threadIdx.x == 0) store(out, bf16, 0, float(s) * scale);' \
  'if (threadIdx.x == 0) store(out, bf16, 0, float(s));'
mutant "GPU weighted accuracy: hits over every slot, not the weights' total" "-ts=gpu-misc -tc=normalize_weights*" \
  'if (threadIdx.x == 0) out[0] = float(hits / (total + eps));' \
  'if (threadIdx.x == 0) out[0] = float(hits / (double(n) + eps));'
mutant "GPU cast: f32 -> bf16 truncated, not rounded" "-ts=gpu-misc -tc=cast*" \
  'uint32_t u = __float_as_uint(f);' \
  'uint32_t u = __float_as_uint(f) & 0xffff0000u;'
mutant "GPU batch: unweighted slots get the weighted slots' decay" "-ts=gpu-misc -tc=dflash_prepare*" \
  'lw[slot] = weighted ? decay.lw1[k] : decay.lw0[k];' \
  'lw[slot] = weighted ? decay.lw1[k] : decay.lw1[k];'
mutant "GPU batch: slot 0 weighted" "-ts=gpu-misc -tc=dflash_prepare*" \
  'const bool weighted = kept && inside && k > 0 && mask[p] != 0;' \
  'const bool weighted = kept && inside && k >= 0 && mask[p] != 0;'
# --- Attention (the drafter's sm90 kernels, the target's causal and cached ones) ---
mutant "GPU attention: a query row sees its anchor's own context key" "-ts=gpu-attention -tc=*GQA*" \
  'return (v < r.ctx) | ((v >= r.dlo) & (v < r.dhi));' \
  'return (v <= r.ctx) | ((v >= r.dlo) & (v < r.dhi));'
mutant "GPU attention: a tile unmasked when the warpgroup's largest context covers it" "-ts=gpu-attention -tc=*GQA*" \
  'return (t + 1) * width <= w.ctx_min;' \
  'return (t + 1) * width <= w.ctx_max;'
mutant "GPU attention: dq not scaled by the softmax scale" "-ts=gpu-attention -tc=*GQA*" \
  'const float x = r.kept ? G.scale * dq[4 * j + 2 * i] : 0.0f, y = r.kept ? G.scale * dq[4 * j + 2 * i + 1] : 0.0f;' \
  'const float x = r.kept ? dq[4 * j + 2 * i] : 0.0f, y = r.kept ? G.scale * dq[4 * j + 2 * i + 1] : 0.0f;'
mutant "GPU causal attention: the diagonal key masked" "-ts=gpu-misc -tc=causal_attention*" \
  'if (masked && j0 + nt * 8 + 2 * t + e > i) x = -INFINITY;' \
  'if (masked && j0 + nt * 8 + 2 * t + e >= i) x = -INFINITY;'
mutant "GPU cached attention: a row sees one key past its last" "-ts=gpu-spec -tc=*decode?ops*" \
  's = (key < k1 && key <= last[rr]) ? s * G.scale : -INFINITY;' \
  's = (key < k1 && key <= last[rr] + 1) ? s * G.scale : -INFINITY;'
mutant "GPU argmax: the margin's runner-up may be the maximum itself" "-ts=gpu-spec -tc=*decode?ops*" \
  'if (j != best_i) second = fmaxf(second, load(x, bf16, row * V + j));' \
  'second = fmaxf(second, load(x, bf16, row * V + j));'
mutant "GPU speculative accept: the block's last token left out of the result" "-ts=gpu-spec -tc=*control?ops*" \
  'for (int64_t k = 0; k < bs; ++k) result[kHeader + k] = block[k];  // all bs slots: slot 0, then the drafts' \
  'for (int64_t k = 0; k + 1 < bs; ++k) result[kHeader + k] = block[k];  // all bs slots: slot 0, then the drafts'
mutant "GPU mul backward: da takes dy * a, not dy * b" "-ts=gpu-ops -tc=add*" \
  'if (da) accumulate_at(da, da_bf16, i, d * load(b, ab_bf16, i));' \
  'if (da) accumulate_at(da, da_bf16, i, d * load(a, ab_bf16, i));'
# --- Added with the tests the first run's survivors asked for ---
mutant "GPU cross-entropy (rows read once): a NaN first logit no longer gives argmax 0" "-ts=gpu-ops -tc=*NaN*" \
  'argmax[r] = int32_t(p0->first_is_nan || t.best == V ? 0 : t.best);' \
  'argmax[r] = int32_t(t.best == V ? 0 : t.best);'
mutant "GPU normalize_weights: divided by the count, not the sum" "-ts=gpu-misc -tc=normalize_weights*" \
  'float denom = float(block_sum(s)) + eps;' \
  'float denom = float(n) + eps;'
# --- The files no other mutant reaches ---
mutant "GPU concat forward: the second part's rows read at the first part's stride" "-ts=gpu-ops -tc=concat*" \
  'y[e] = k < A ? a[o * A + k] : b[o * B + (k - A)];' \
  'y[e] = k < A ? a[o * A + k] : b[o * A + (k - A)];'
mutant "GPU concat backward: the second part's gradient taken from the first's columns when widths differ" "-ts=gpu-kernels -tc=concat*" \
  'const int64_t W = A + B, L = second ? B : A, off = second ? A : 0, units = L / U, total = outer * units;' \
  'const int64_t W = A + B, L = second ? B : A, off = second ? B : 0, units = L / U, total = outer * units;'
mutant "GPU concat backward (elements): the second part overwritten, not accumulated" "-ts=gpu-kernels -tc=concat*" \
  'if (second) db[d] = from_float<TB>(__fadd_rn(to_float(db[d]), s));' \
  'if (second) db[d] = from_float<TB>(s);'
mutant "GPU split: a part's columns start at the row's start" "-ts=gpu-ops -tc=split_columns*" \
  'static_cast<U*>(p.dst[i])[o * (p.start[i + 1] - p.start[i]) + (k - p.start[i])] = x[e];' \
  'static_cast<U*>(p.dst[i])[o * (p.start[i + 1] - p.start[i]) + (k - p.start[i])] = x[o * p.start[p.n] + (k - p.start[i])];'
mutant "GPU strided copy: source rows at the destination's pitch" "-ts=gpu-ops -tc=drop_group_heads*" \
  'dst[r * dst_pitch + k] = src[r * src_pitch + k];' \
  'dst[r * dst_pitch + k] = src[r * dst_pitch + k];'
mutant "GPU strided fill: a 4-byte word fills only three of its bytes" "-ts=gpu-ops,gpu-spec -tc=drop_group_heads*,*control?ops*" \
  'const uint32_t word = 0x01010101u * byte;' \
  'const uint32_t word = 0x00010101u * byte;'
mutant "GPU fill: the elements after the packs start one late" "-ts=gpu-kernels -tc=accumulate*" \
  'for (int64_t i = packs * kPack + first; i < n; i += stride) p[i] = from_float<T>(value);' \
  'for (int64_t i = packs * kPack + first + 1; i < n; i += stride) p[i] = from_float<T>(value);'
mutant "GPU accumulate (packs): dst overwritten by src" "-ts=gpu-kernels -tc=accumulate*" \
  'for (int j = 0; j < kPack; ++j) d[j] = __fadd_rn(d[j], s[j]);' \
  'for (int j = 0; j < kPack; ++j) d[j] = s[j];'
mutant "GPU copy: the last byte after the packs never copied" "-ts=gpu-misc -tc=copy_*" \
  'for (int64_t i = packs * 16 + first; i < bytes; i += stride) dst[i] = src[i];' \
  'for (int64_t i = packs * 16 + first; i + 1 < bytes; i += stride) dst[i] = src[i];'
mutant "GPU update over ranks: the last slice's squares left out of the norm" "-ts=gpu-optimizer -tc=*over?ranks*" \
  'norm[0] = float(sqrt(s));' \
  'norm[0] = float(sqrt(s - sums[count - 1]));'
mutant "GPU update over ranks: warmup lr from step t, not t + 1" "-ts=gpu-optimizer -tc=*over?ranks*" \
  'value = float(double(peak) * double(t + 1) / double(warmup));' \
  'value = float(double(peak) * double(t) / double(warmup));'
mutant "GPU update over ranks: the gradient scale ignored" "-ts=gpu-optimizer -tc=*over?ranks*" \
  'float x = g[i] * scale;' \
  'float x = g[i];'
mutant "GPU update over ranks: bias correction inside the square root" "-ts=gpu-optimizer -tc=*over?ranks*" \
  'float p = a.p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + a.eps);' \
  'float p = a.p[i] * decay - step_size * mi / (sqrtf(vi / bc2_sqrt) + a.eps);'
mutant "GPU update over ranks: clipping never binds" "-ts=gpu-optimizer -tc=*over?ranks*" \
  'float c = a.max_grad_norm / (a.norm[0] + 1e-6f);' \
  'float c = a.max_grad_norm / (a.norm[0] + 1e-6f) + 1.0f;'
mutant "GPU attention (sm90 forward): the running sum not rescaled by a new maximum" "-ts=gpu-attention -tc=*GQA*" \
  'l[i] = l[i] * corr[i] + sum;' \
  'l[i] = l[i] + sum;'
mutant "GPU attention (sm90 forward): lse left in log2 units" "-ts=gpu-attention -tc=*GQA*" \
  'if (tq == 0) p.lse[r.lse_index] = ok ? m[i] * kLn2 + logf(sum) : 0.0f;' \
  'if (tq == 0) p.lse[r.lse_index] = ok ? m[i] + logf(sum) : 0.0f;'
mutant "GPU attention (sm90 forward): the odd output column takes the even one's value" "-ts=gpu-attention -tc=*GQA*" \
  'const float x = ok ? o[4 * j + 2 * i] * inv : 0.0f, y = ok ? o[4 * j + 2 * i + 1] * inv : 0.0f;' \
  'const float x = ok ? o[4 * j + 2 * i] * inv : 0.0f, y = ok ? o[4 * j + 2 * i] * inv : 0.0f;'
mutant "GPU attention (sm90 forward): the odd output columns never rescaled" "-ts=gpu-attention -tc=*GQA*" \
  'for (int i = 0; i < 2; ++i) o[4 * j + 2 * i] *= corr[i], o[4 * j + 2 * i + 1] *= corr[i];' \
  'for (int i = 0; i < 2; ++i) o[4 * j + 2 * i] *= corr[i];'
mutant "GPU attention (quads): the row max over lane pairs only" "-ts=gpu-attention -tc=*GQA*" \
  'return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));' \
  'return v;'
mutant "GPU attention (sm90 dk/dv): dS^T without D" "-ts=gpu-attention -tc=*GQA*" \
  'dpt[x] = vis ? pr * (dpt[x] - d) : 0.0f;' \
  'dpt[x] = vis ? pr * dpt[x] : 0.0f;'
mutant "GPU attention (sm90 dk/dv): a row sees the key at its upper bound" "-ts=gpu-attention -tc=*GQA*" \
  'const bool vis = full | ((kidx[i2] >= lo[e]) & (kidx[i2] < hi[e]));' \
  'const bool vis = full | ((kidx[i2] >= lo[e]) & (kidx[i2] <= hi[e]));'
mutant "GPU attention (sm90 dk/dv): dk's even columns not scaled" "-ts=gpu-attention -tc=*GQA*" \
  'put_pair(p.dk, p.dk_bf16, p.dk_fresh, base + col, G.scale * dk[4 * j + 2 * i2],' \
  'put_pair(p.dk, p.dk_bf16, p.dk_fresh, base + col, dk[4 * j + 2 * i2],'
mutant "GPU attention (sm90 delta): the sum over 8 of a row's 16 lanes" "-ts=gpu-attention -tc=*larger*" \
  'for (int x = 8; x > 0; x >>= 1) acc += __shfl_xor_sync(kFull, acc, x);' \
  'for (int x = 4; x > 0; x >>= 1) acc += __shfl_xor_sync(kFull, acc, x);'
mutant "GPU attention (fused dq): every contribution stores, none adds" "-ts=gpu-attention -tc=*fused?backward:?dq*" \
  'if (turn == 0) bulk_store(dst, sDQ, kDqChunkBytes);' \
  'if (turn >= 0) bulk_store(dst, sDQ, kDqChunkBytes);'
mutant "GPU attention (TMA): the delta map reads lse" "-ts=gpu-attention -tc=*TMA*" \
  'encode(&maps->delta, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, p.delta, ldims, lstrides, lbox,' \
  'encode(&maps->delta, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, p.lse_in, ldims, lstrides, lbox,'
mutant "GPU attention (version 1 forward): lse left in log2 units" "-ts=gpu-attention -tc=*versions*,*GQA*" \
  'if (tq == 0) p.lse[li] = m[mt][i] * kLn2 + logf(sum);' \
  'if (tq == 0) p.lse[li] = m[mt][i] + logf(sum);'
mutant "GPU attention (version 1 dk/dv): dS^T without D" "-ts=gpu-attention -tc=*versions*,*GQA*" \
  'if constexpr ((WANT & kWantDk) != 0) dp[nb][j] = prob * (dp[nb][j] - dt[col]);' \
  'if constexpr ((WANT & kWantDk) != 0) dp[nb][j] = prob * dp[nb][j];'
mutant "GPU attention (version 1 dq): the odd columns not scaled" "-ts=gpu-attention -tc=*versions*,*GQA*" \
  'accumulate_at(p.dq, p.dq_bf16, base + col + 1, G.scale * dq[nd][2 * i + 1]);' \
  'accumulate_at(p.dq, p.dq_bf16, base + col + 1, dq[nd][2 * i + 1]);'
mutant "GPU accumulate_at: the old value dropped" "-ts=gpu-attention,gpu-ops -tc=*versions*,add*" \
  'store(p, bf16, i, load(p, bf16, i) + v);' \
  'store(p, bf16, i, v);'
mutant "GPU bf16 packs: the odd element read as the even one" "-ts=gpu-kernels -tc=accumulate*" \
  'v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);' \
  'v[2 * k + 1] = __uint_as_float(w[k] << 16);'
mutant "GPU warp_sum: over half a warp" "-ts=gpu-ops,gpu-attention -tc=sum*,*versions*" \
  'for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // offsets 16 to 1: all 32 lanes' \
  'for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // offsets 16 to 1: all 32 lanes'
mutant "GPU block_sum: the last warp's total left out" "-ts=gpu-ops,gpu-misc -tc=sum*,normalize_weights*" \
  'for (int w = 1; w < Threads / 32; ++w) total += sh[w];' \
  'for (int w = 1; w + 1 < Threads / 32; ++w) total += sh[w];'
mutant "GPU GEMM tuning: C never restored (a candidate runs on C it already wrote, beta 1)" "-ts=gpu-optimizer -tc=*tuning*" \
  'auto restore_c = [&] { cuda_ok(cudaMemcpyAsync(g.C, saved, extent, cudaMemcpyDeviceToDevice, s), "restoring C"); };' \
  'auto restore_c = [&] {};'
mutant "GPU cuDNN attention: the band admits one key past the diagonal" "-ts=gpu-cudnn" \
  '.set_diagonal_band_right_bound(0)' \
  '.set_diagonal_band_right_bound(1)'
# --- The runtime's CUDA side (runtime/cuda/): GEMM tuning's records, cuDNN's plan cache ---
# (The tuner's pick among candidates survived here, as no test shape had a refused candidate: it moved
# to kernels/cuda/gemm_candidates.h's fastest_agreeing, a CPU mutant in scripts/mutants-list.sh.)
mutant "GPU GEMM tuner: a shape left to cuBLAS not recorded as decided" "-ts=gpu-optimizer,gpu-gemm-tuning -tc=*tuning*,*tuned*" \
  'ctx.gemm_table().set(k, kCublasDefault);' \
  '(void)kCublasDefault;'
mutant "GPU GEMM tuner: every saved cuBLASLt choice tuned again" "-ts=gpu-optimizer,gpu-gemm-tuning -tc=*tuning*,*tuned*" \
  'if (is_cublas_default(*kept) || kernels::cuda::lt_config_runs(args_of(k, nullptr, nullptr, nullptr), kept->data()))' \
  'if (is_cublas_default(*kept))'
mutant "GPU cuDNN attention: a plan reused for another softmax scale" "-ts=gpu-cudnn" \
  'std::memcmp(&x.scale, &y.scale, sizeof(float)) == 0;' \
  'true;'
mutant "GPU cuDNN attention: a plan reused for another sequence length" "-ts=gpu-cudnn" \
  'return x.B == y.B && x.S == y.S && x.nh == y.nh && x.nkv == y.nkv && x.hd == y.hd &&' \
  'return x.B == y.B && x.nh == y.nh && x.nkv == y.nkv && x.hd == y.hd &&'
# --- Batched decoding: the slot cache's kernels (kernels/cuda/slot_attention.cu, generate.cu) ---
mutant "GPU slot attention: a row sees its keys up to pos - 1, not pos" "-ts=gpu-generate -tc=slot?attention*" \
  'int64_t last = a.pos[i] < G.C ? a.pos[i] : G.C - 1;' \
  'int64_t last = a.pos[i] < G.C ? a.pos[i] - 1 : G.C - 1;'
mutant "GPU slot attention: every kv head's CTA loads the first group's query heads" "-ts=gpu-generate -tc=slot?attention*" \
  'const int64_t hd = G.hd, s = a.slot[i], head0 = g * G.group + chunk * GW;' \
  'const int64_t hd = G.hd, s = a.slot[i], head0 = chunk * GW;'
mutant "GPU slot attention: the reduce-scatter keeps a lane's own partial sums" "-ts=gpu-generate -tc=slot?attention*" \
  'x[t] = keep + __shfl_xor_sync(0xffffffffu, send, O);' \
  'x[t] = keep;'
mutant "GPU slot attention: keys past a block's end keep their scores" "-ts=gpu-generate -tc=slot?attention*" \
  'const float sc = t0 + (lane / R) % KB < k1 ? x[0] : -INFINITY;' \
  'const float sc = x[0];'
mutant "GPU slot attention: the merge adds each slice's output without its max's scale" "-ts=gpu-generate -tc=slot?attention*" \
  'if (ms != -INFINITY) o += a.partial_o[(s * plane + ih) * G.hd + d] * __expf(ms - M);' \
  'if (ms != -INFINITY) o += a.partial_o[(s * plane + ih) * G.hd + d];'
mutant "GPU slot attention: the warps' outputs merged without their maxes' scales" "-ts=gpu-generate -tc=slot?attention*" \
  'O = fmaf(sO[w][h][d], f, O);' \
  'O += sO[w][h][d];'
mutant "GPU scatter: every slot's rows written into slot 0" "-ts=gpu-generate -tc=slot?attention*" \
  'return s >= 0 && s < S && p >= 0 && p < C ? s * C + p : -1;' \
  'return s >= 0 && s < S && p >= 0 && p < C ? p : -1;'
mutant "GPU gather: every entry takes row 0" "-ts=gpu-generate -tc=slot?attention*" \
  'out[i] = r >= 0 && r < n ? src[r * units + u] : U{};' \
  'out[i] = r >= 0 && r < n ? src[u] : U{};'
# --- Config keys whose effect shows on a GPU only (docs/TESTING.md, "Config keys and their mutants") ---
mutant "key runtime.gemm_tuning ignored (cuBLAS picks, no table)" "-ts=gpu-gemm-tuning" \
  'const bool tunes_gemms = c.runtime.gemm_tuning && c.runtime.graphs && cluster_.devices[0].is_cuda();' \
  'const bool tunes_gemms = false && c.runtime.graphs && cluster_.devices[0].is_cuda();'
mutant "key runtime.rendezvous_timeout_s ignored (300 s)" "-ts=gpu-config-keys" \
  'o.timeout_s = cfg.runtime.rendezvous_timeout_s;' \
  'o.timeout_s = 300;'
mutant "key runtime.target_attention ignored (auto)" "-ts=target-attention -tc=runtime.target_attention:?setting*" \
  'set_target_attention(parse_target_attention(cfg.runtime.target_attention));' \
  'set_target_attention(parse_target_attention("auto"));'
# --- runtime.kernels at the launchers (kernels/cuda/device_traits.h, runtime/cuda/cuda_backend.cpp) ---
mutant "GPU runtime.kernels: the launchers ignore the process's portable choice" "-ts=gpu-drafter,gpu-attention,gpu-ops -tc=*replays*,*golden*" \
  'const bool portable = portable_kernels().load(std::memory_order_relaxed);' \
  'const bool portable = false;'
mutant "GPU runtime.kernels: the process's choice never handed to the launchers" "-ts=gpu-drafter,gpu-attention,gpu-ops -tc=*replays*,*golden*" \
  'void set_portable_kernels(bool portable) { kernels::cuda::portable_kernels().store(portable); }' \
  'void set_portable_kernels(bool portable) { (void)portable; }'
# --- The resident norms' launch (kernels/cuda/common.cuh) ---
mutant "GPU resident norms: the weights loaded ahead all the first pack's" "-ts=gpu-kernels,gpu-ops -tc=*rmsnorm*" \
  'for (int k = 0; k < P; ++k) wv[k] = load_words16(w + at(k));' \
  'for (int k = 0; k < P; ++k) wv[k] = load_words16(w + at(0));'
# --- The q|k|v product into the slot cache (kernels/cuda/fused_norms.cu) ---
mutant "GPU rmsnorm_rope_into_slots: v's cache rows copied from k's columns" "-ts=gpu-ops -tc=rmsnorm_rope_into_slots*" \
  'store_words16(a.v_cache + at + i * N, load_words16(a.v + row * a.ldv + i * N));' \
  'store_words16(a.v_cache + at + i * N, load_words16(a.k + row * a.ldk + i * N));'
mutant "GPU rmsnorm_rope_into_slots: a position past the cache written" "-ts=gpu-ops -tc=rmsnorm_rope_into_slots*" \
  'k_kept = sl >= 0 && sl < a.S && position >= 0 && position < a.C;' \
  'k_kept = sl >= 0 && sl < a.S && position >= 0;'
