// Counts heap allocations made by the calling thread while counting is on, by interposing
// malloc and friends (forwarded to glibc). Proves that replay allocates nothing of any kind.
#include <cstddef>
#include <cstdint>
#include <cstring>

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace dflash::test {
thread_local bool t_counting = false;
thread_local uint64_t t_allocations = 0;
}  // namespace dflash::test

using dflash::test::t_allocations;
using dflash::test::t_counting;

extern "C" {
void* malloc(size_t n) {
  if (t_counting) ++t_allocations;
  return __libc_malloc(n);
}
void free(void* p) { __libc_free(p); }
void* calloc(size_t a, size_t b) {
  if (t_counting) ++t_allocations;
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  if (t_counting) ++t_allocations;
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) {
  if (t_counting) ++t_allocations;
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  if (t_counting) ++t_allocations;
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  if (t_counting) ++t_allocations;
  void* p = __libc_memalign(align, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
