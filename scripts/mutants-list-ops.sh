# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh, so the numbers continue):
# the runtime's ops (runtime/ops/): their forward and backward wiring, shapes and dtypes.
mutant "concat: records no backward when only the second input needs a gradient" "-ts=ops -tc=concat*" \
  'bool grad = needs_grad({&a, &b});' \
  'bool grad = needs_grad({&a});'
mutant "concat: the dims after the concatenated one are not compared" "-ts=ops,ops-wiring -tc=concat*" \
  'DF_CHECK(i == d || a.dim(i) == b.dim(i),' \
  'DF_CHECK(i >= d || a.dim(i) == b.dim(i),'
mutant "swiglu: up's gradient may take gate's storage" "-ts=autograd,ops,ops-wiring -tc=swiglu*" \
  'auto [du, du_fresh] = g.in_overwritable(up, up);' \
  'auto [du, du_fresh] = g.in_overwritable(up, gate);'
mutant "add: shapes with the same element count are accepted" "-ts=ops-wiring,tensor -tc=*add*,dtype?*" \
  'DF_CHECK(a.shape() == b.shape(), op << ": shapes differ: "' \
  'DF_CHECK(a.numel() == b.numel(), op << ": shapes differ: "'
mutant "add backward: the second input's gradient overwritten, not added to" "-ts=ops -tc=add?*" \
  'else accumulate_(db, dy);' \
  'else copy_(db, dy);'
mutant "mul backward: the second input's gradient into the first's buffer" "-ts=ops -tc=add?*" \
  'float* db = f32(g.in(b));' \
  'float* db = f32(g.in(a));'
mutant "drop_group_heads backward: an accumulating gradient is overwritten" "-ts=ops,ops-wiring -tc=*group_heads*" \
  'if (fresh && dx.dtype() == dy.dtype()) {' \
  'if (dx.dtype() == dy.dtype()) {'
mutant "with_group_heads: a tensor that requires grad is not refused" "-ts=ops,ops-wiring -tc=*group_heads*" \
  'DF_CHECK(!needs_grad({&y}), "with_group_heads: "' \
  'DF_CHECK(true, "with_group_heads: "'
mutant "linear_cross_entropy (frozen lm_head) backward: dh overwritten, not added to" "-ts=ops,ops-wiring -tc=linear_cross_entropy*" \
  'for (int64_t i = 0; i < n; ++i) d[i] += k[0] * p[i];' \
  'for (int64_t i = 0; i < n; ++i) d[i] = k[0] * p[i];'
mutant "linear_cross_entropy (trainable lm_head) backward: dh overwritten, not added to" "-ts=ops,ops-wiring -tc=linear_cross_entropy*" \
  'pdh + r0 * H, H, 1.0f);  // dh += dlogits W' \
  'pdh + r0 * H, H, 0.0f);  // dh += dlogits W'
mutant "linear_cross_entropy (trainable lm_head) backward: dW keeps only the last chunk" "-ts=ops,ops-wiring -tc=linear_cross_entropy*" \
  'pdw, H, 1.0f);  // dW += dlogits^T h' \
  'pdw, H, 0.0f);  // dW += dlogits^T h'
mutant "causal_attention: k's batch dim is not compared with q's" "-ts=target,ops-wiring -tc=causal_attention*" \
  'DF_CHECK(k.dim(0) == B && k.dim(1) == S && k.dim(3) == hd,' \
  'DF_CHECK(k.dim(1) == S && k.dim(3) == hd,'
mutant "causal_attention: v's dtype is not checked on the CPU" "-ts=target,ops-wiring -tc=causal_attention*" \
  'check_dtype(kOp, v, DType::f32, "v");' \
  'check_dtype(kOp, k, DType::f32, "v");'
mutant "dflash_attention: a saved lse of the wrong shape is accepted" "-ts=attention,ops-wiring -tc=*saved*,bad?arguments*" \
  'saved->out.dtype() == q.dtype() && saved->lse.shape() == lse_shape;' \
  'saved->out.dtype() == q.dtype();'
mutant "dflash_attention_all_tiles: a partial context tile is not counted" "-ts=attention,ops-wiring -tc=*tiles*" \
  'return batch * n_blocks * ((context_len + key_tile - 1) / key_tile + n_blocks);' \
  'return batch * n_blocks * (context_len / key_tile + n_blocks);'
mutant "dflash_attention backward: k's and v's gradients swapped" "-ts=attention -tc=*backward*" \
  'float *dq = f32(g.in(q)), *dk = f32(g.in(k)), *dv = f32(g.in(v));' \
  'float *dq = f32(g.in(q)), *dk = f32(g.in(v)), *dv = f32(g.in(k));'
