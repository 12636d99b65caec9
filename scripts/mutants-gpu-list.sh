# The CUDA kernels' mutants (scripts/mutants.sh --gpu, sourced by it; run on the GPU machine by
# `scripts/gpu-check.sh mutants-gpu`): each plants one bug in kernels/cuda/ that a GPU test must catch.
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
  'sincosf(pos * inv_freq[i], &angles[half + i], &angles[i]);' \
  'sincosf(pos * inv_freq[i], &angles[i], &angles[half + i]);'
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
  'for (int64_t k = 0; k < bs; ++k) result[kHeader + k] = block[k];' \
  'for (int64_t k = 0; k + 1 < bs; ++k) result[kHeader + k] = block[k];'
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
