# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh after mutants-list-model.sh):
# the runtime ops' argument checks and autograd wiring (runtime/ops/), and the CPU kernels under them (kernels/cpu/).
mutant "cast: the CPU takes any source dtype, checking only the target" "-ts=ops -tc=cast?on?the?CPU?refuses*" \
  'DF_CHECK(from == DType::f32 && to == DType::f32,' \
  'DF_CHECK(to == DType::f32,'
mutant "cast backward: the input's gradient overwritten, not added to" "-ts=ops -tc=cast?backward*" \
  'if (dy.defined() && dx.defined()) accumulate_(dx, dy);' \
  'if (dy.defined() && dx.defined()) copy_(dx, dy);'
mutant "embedding: the ids' count read from their first dim only" "-ts=ops -tc=embedding?forward*" \
  'int64_t n = ids.numel(), V = table.dim(0), H = table.dim(1);' \
  'int64_t n = ids.dim(0), V = table.dim(0), H = table.dim(1);'
mutant "embedding: the backward keyed on the ids' gradient flag, not the table's" "-ts=ops -tc=embedding?backward*" \
  'if (needs_grad({&table})) {' \
  'if (needs_grad({&ids})) {'
mutant "weighted_accuracy: weights of another length than the labels accepted" "-ts=ops-kernels-wiring -tc=weighted_accuracy*" \
  'DF_CHECK(argmax.numel() == labels.numel() && labels.numel() == w.numel(),' \
  'DF_CHECK(argmax.numel() == labels.numel(),'
mutant "normalize_weights: eps dropped from the denominator" "-ts=ops-kernels-wiring -tc=normalize_weights*" \
  'ctx().launch([=] { kernels::cpu::normalize_weights(pw, n, eps, po); });' \
  'ctx().launch([=] { kernels::cpu::normalize_weights(pw, n, 0.0f, po); });'
mutant "accumulate_: a source larger than the destination accepted" "-ts=ops-kernels-wiring -tc=accumulate_*" \
  'DF_CHECK(dst.numel() == src.numel(), "accumulate: destination "' \
  'DF_CHECK(dst.numel() <= src.numel(), "accumulate: destination "'
mutant "copy_: tensors of another dtype but as many bytes accepted" "-ts=ops-kernels-wiring -tc=accumulate_*" \
  'DF_CHECK(dst.nbytes() == src.nbytes() && dst.dtype() == src.dtype(),' \
  'DF_CHECK(dst.nbytes() == src.nbytes(),'
mutant "mean forward: the sum, not divided by the count" "-ts=ops-kernels-wiring -tc=mean*" \
  'if (scale == 1.0f) {' \
  'if (scale != 0.0f) {'
mutant "mean: an empty tensor's mean is NaN, not 0" "-ts=ops-kernels-wiring -tc=mean*" \
  'return reduce("mean", x, x.numel() ? 1.0f / float(x.numel()) : 0.0f);' \
  'return reduce("mean", x, 1.0f / float(x.numel()));'
mutant "rmsnorm: records no backward when only the weight needs a gradient" "-ts=ops-kernels-wiring -tc=rmsnorm?with?a?frozen*" \
  'bool grad = needs_grad({&x, &weight});' \
  'bool grad = needs_grad({&x});'
mutant "rmsnorm backward: dx written over even when it already holds a gradient" "-ts=ops -tc=rmsnorm?backward*" \
  'ctx().launch([=, fresh = dx_fresh] {' \
  'ctx().launch([=, fresh = true] {'
mutant "rope: a head dim of 0 accepted" "-ts=ops-kernels-wiring -tc=rope?refuses*" \
  'DF_CHECK(hd >= 2 && hd % 2 == 0, "rope: x "' \
  'DF_CHECK(hd % 2 == 0, "rope: x "'
mutant "rope: inv_freq's dtype not checked" "-ts=ops-kernels-wiring -tc=rope?refuses*" \
  'check_dtype("rope", inv_freq, DType::f32, "inv_freq");' \
  'check_dtype("rope", inv_freq, inv_freq.dtype(), "inv_freq");'
mutant "rope backward: dx written over even when it already holds a gradient" "-ts=ops -tc=rope?backward*" \
  'ctx().launch([=, fresh = fresh] { kernels::cpu::rope_backward(pdy, pp, pf, pdx, rows, heads, hd, fresh); });' \
  'ctx().launch([=, fresh = fresh] { kernels::cpu::rope_backward(pdy, pp, pf, pdx, rows, heads, hd, true); });'
mutant "reshape backward: the gradient dropped when the base is a leaf or already holds one" "-ts=ops-kernels-wiring -tc=reshape*" \
  'if (dy.defined()) g.pass(base, view_of(dy, base.shape()));' \
  'if (dy.defined()) g.adopt(base, view_of(dy, base.shape()));'
mutant "rows: a negative begin accepted" "-ts=ops-kernels-wiring -tc=rows*" \
  'DF_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0),' \
  'DF_CHECK(ndim() >= 1 && begin <= end && end <= dim(0),'
mutant "rows backward: the range's gradient overwrites what the base's holds" "-ts=ops-kernels-wiring -tc=rows*" \
  'ops::accumulate_(view_of(db, s, size_t(begin) * grad_row_bytes), dy);' \
  'ops::copy_(view_of(db, s, size_t(begin) * grad_row_bytes), dy);'
mutant "concat kernel: b's rows read at a's width" "-ts=ops -tc=concat?forward*" \
  'if (b_inner) std::memcpy(py + a_inner, pb + size_t(o) * b_inner, b_inner);' \
  'if (b_inner) std::memcpy(py + a_inner, pb + size_t(o) * a_inner, b_inner);'
mutant "concat backward kernel: b's gradient overwritten, not added to" "-ts=ops-kernels-wiring -tc=concat*" \
  'for (int64_t j = 0; j < b_inner; ++j) db[o * b_inner + j] += row[a_inner + j];' \
  'for (int64_t j = 0; j < b_inner; ++j) db[o * b_inner + j] = row[a_inner + j];'
mutant "mul backward kernel: b's gradient is dy * b, not dy * a" "-ts=ops -tc=add??mul*" \
  'for (int64_t i = 0; i < n; ++i) db[i] += dy[i] * a[i];' \
  'for (int64_t i = 0; i < n; ++i) db[i] += dy[i] * b[i];'
mutant "scale backward kernel: the gradient overwritten, not added to" "-ts=ops -tc=rmsnorm?backward*" \
  'for (int64_t i = 0; i < n; ++i) da[i] += dy[i] * s;' \
  'for (int64_t i = 0; i < n; ++i) da[i] = dy[i] * s;'
mutant "fill_f32: the last element left unfilled" "-ts=ops-kernels-wiring -tc=fill*" \
  'for (int64_t i = 0; i < n; ++i) p[i] = value;' \
  'for (int64_t i = 0; i + 1 < n; ++i) p[i] = value;'
mutant "fill_zero: the byte count taken as a float count (a quarter zeroed)" "-ts=ops-kernels-wiring -tc=fill*" \
  'void fill_zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }' \
  'void fill_zero(void* p, size_t bytes) { std::memset(p, 0, bytes / sizeof(float)); }'
mutant "gemm: beta 1 overwrites C instead of adding to it" "-ts=ops,ops-wiring -tc=linear_cross_entropy*" \
  'c.noalias() += alpha * (a * b);' \
  'c.noalias() = alpha * (a * b);'
mutant "gemm with K 0: C left as it was when beta is 0" "-ts=ops-kernels-wiring -tc=gemm_f32*" \
  'if (beta == 0.0f) c.setZero();' \
  'if (beta == 0.0f) return;'
mutant "sum_squares: added to its slot, not written (the norm grows step by step)" "-ts=trainer-reference -tc=each?step?equals*" \
  'out[0] = s;' \
  'out[0] += s;'
mutant "norm_from_slice_sums: the squared norm, its square root forgotten" "-ts=trainer-reference -tc=each?step?equals*" \
  'norm[0] = float(std::sqrt(s));' \
  'norm[0] = float(s);'
