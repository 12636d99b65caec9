# Mutants of scripts/mutants.sh in headers that nearly every file includes (runtime/dtype.h, shape.h,
# allocator.h, tensor.h, context.h): each one rebuilds the whole CPU test binary twice (planted, then
# restored), about 4 minutes each on CI's 2 cores, so CI leaves them out; DFLASH_MUTANTS_HEADERS=1 adds
# them at the end of the list (sourced by scripts/mutants-list-files.sh). Their tests run in every CI.
# --- bf16 and f16 conversions (runtime/dtype.h) ---
mutant "bf16: a NaN whose payload lies in the low half becomes infinity (quiet bit not set)" "-ts=inline-wiring -tc=bf16?from?f32*" \
  'if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);' \
  'if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(u >> 16);'
mutant "bf16: infinity converted as NaN" "-ts=inline-wiring -tc=bf16?from?f32*" \
  'if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);' \
  'if ((u & 0x7fffffffu) >= 0x7f800000u) return uint16_t((u >> 16) | 0x40);'
mutant "f16: a NaN read as infinity (its mantissa dropped)" "-ts=inline-wiring -tc=f16?to?f32*" \
  'u = sign | 0x7f800000u | man << 13;' \
  'u = sign | 0x7f800000u;'
# --- Shapes, alignment, tensors, contexts (runtime/shape.h, allocator.h, tensor.h, context.h) ---
mutant "shape: shapes of different rank compare equal when one is a prefix of the other" "-ts=inline-wiring -tc=shapes?of?different?rank*" \
  'if (ndim != o.ndim) return false;' \
  '(void)0;'
mutant "align_up: an exact multiple grows by a whole block" "-ts=tensor,replay" \
  'inline size_t align_up(size_t n, size_t a = kAlignment) { return (n + a - 1) / a * a; }' \
  'inline size_t align_up(size_t n, size_t a = kAlignment) { return (n + a) / a * a; }'
mutant "tensor: data<T>() of another dtype not refused" "-ts=tensor" \
  'DF_CHECK(dtype() == dtype_of<T>::value, "data<"' \
  'DF_CHECK(true, "data<"'
mutant "context: a planning pass counts as not recording, so host copies are not refused there" "-ts=inline-wiring -tc=a?host?copy?inside*" \
  'bool recording() const { return mode_ != Mode::eager; }' \
  'bool recording() const { return mode_ == Mode::record; }'
