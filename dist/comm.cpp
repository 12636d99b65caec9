// Thread and sequential communicators (the same rank-ordered sums, with and without threads) and
// the recordable collective kernel calls.
#include "dist/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/context.h"
#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace {
// result[i] = ((b0[i] + b1[i]) + b2[i]) + ... for i in [begin, end).
void ordered_sum(const std::vector<float*>& buffers, float* result, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float s = buffers[0][i];
    for (size_t r = 1; r < buffers.size(); ++r) s += buffers[r][i];
    result[i] = s;
  }
}

void check_registered(const std::vector<float*>& buffers, float* data, int64_t n, int64_t want, int rank) {
  DF_CHECK(rank >= 0 && size_t(rank) < buffers.size(), "all_reduce: rank " << rank << " outside the world of "
                                                                              << buffers.size());
  DF_CHECK(buffers[size_t(rank)] == data && n == want,
           "all_reduce: rank " << rank << " passed a buffer other than the one registered at startup "
                               << "(collectives run over fixed addresses)");
}

void check_rank(int rank, int world, const char* what) {
  DF_CHECK(rank >= 0 && rank < world, what << ": rank " << rank << " outside the world of " << world);
}
}  // namespace

void AbortableBarrier::arrive_and_wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!aborted_.empty()) DF_FAIL(aborted_);
  if (++arrived_ == count_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const uint64_t gen = generation_;
  cv_.wait(lock, [&] { return generation_ != gen || !aborted_.empty(); });
  if (generation_ == gen) DF_FAIL(aborted_);
}

void AbortableBarrier::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_.empty()) aborted_ = why;
  cv_.notify_all();
}

ThreadCommunicator::ThreadCommunicator(int world, int64_t n)
    : world_(world), n_(n), buffers_(size_t(std::max(world, 1)), nullptr), published_(size_t(std::max(world, 1))),
      result_(size_t(n)), barrier_(world) {
  DF_CHECK(world >= 1, "ThreadCommunicator: world must be at least 1");
}

void ThreadCommunicator::register_buffer(int rank, float* data, int64_t n) {
  std::lock_guard<std::mutex> lock(register_mutex_);
  check_rank(rank, world_, "ThreadCommunicator::register_buffer");
  if (n_ == 0 && n > 0) {
    n_ = n;
    result_.resize(size_t(n));
  }
  DF_CHECK(n < 0 || n == n_, "ThreadCommunicator::register_buffer: rank " << rank << " registers " << n
                                                                           << " floats but the others " << n_
                                                                           << " (every rank must hold the same model)");
  buffers_.at(size_t(rank)) = data;
}

void ThreadCommunicator::all_reduce_sum(float* data, int64_t n, int rank) {
  check_registered(buffers_, data, n, n_, rank);
  if (world_ == 1) return;
  barrier_.arrive_and_wait();  // every rank's gradients are complete
  int64_t per = (n_ + world_ - 1) / world_;
  int64_t begin = std::min<int64_t>(n_, per * rank), end = std::min<int64_t>(n_, begin + per);
  ordered_sum(buffers_, result_.data(), begin, end);
  barrier_.arrive_and_wait();  // every slice is reduced; nobody reads the inputs any more
  std::memcpy(data, result_.data(), size_t(n_) * sizeof(float));
}

void ThreadCommunicator::reduce_scatter_sum(const float* send, float* recv, int64_t count, int rank, void* stream) {
  DF_CHECK(!stream, "reduce_scatter of GPU memory through a CPU communicator: GPU workers need NCCL");
  check_rank(rank, world_, "reduce_scatter");
  published_[size_t(rank)] = send;
  barrier_.arrive_and_wait();  // every rank's input is complete and published
  // Each rank reads only its own slice of every buffer and writes only its own recv, so an
  // in-place recv (inside its own slice) is never read by another rank.
  const int64_t at = int64_t(rank) * count;
  for (int64_t i = 0; i < count; ++i) {
    float s = static_cast<const float*>(published_[0])[at + i];
    for (int q = 1; q < world_; ++q) s += static_cast<const float*>(published_[size_t(q)])[at + i];
    recv[i] = s;
  }
  barrier_.arrive_and_wait();  // nobody reads the inputs any more
}

void ThreadCommunicator::all_gather(const void* send, void* recv, size_t bytes, int rank, void* stream) {
  DF_CHECK(!stream, "all_gather of GPU memory through a CPU communicator: GPU workers need NCCL");
  check_rank(rank, world_, "all_gather");
  published_[size_t(rank)] = send;
  barrier_.arrive_and_wait();
  for (int q = 0; q < world_; ++q) {
    uint8_t* dst = static_cast<uint8_t*>(recv) + size_t(q) * bytes;
    if (dst != published_[size_t(q)]) std::memcpy(dst, published_[size_t(q)], bytes);
  }
  barrier_.arrive_and_wait();
}

void ThreadCommunicator::abort() { barrier_.abort("a collective was aborted: another rank failed"); }

SequentialCommunicator::SequentialCommunicator(int world, int64_t n)
    : world_(world), n_(n), buffers_(size_t(world), nullptr), result_(size_t(n)) {}

void SequentialCommunicator::register_buffer(int rank, float* data) { buffers_.at(size_t(rank)) = data; }

void SequentialCommunicator::all_reduce_sum(float* data, int64_t n, int rank) {
  check_registered(buffers_, data, n, n_, rank);
  if (calls_++ % world_ == 0) {
    ordered_sum(buffers_, result_.data(), 0, n_);
    for (float* b : buffers_) std::memcpy(b, result_.data(), size_t(n_) * sizeof(float));
  }
}

void Communicator::all_reduce_sum_on_stream(float*, int64_t, int, void*) {
  DF_FAIL("all_reduce of GPU memory through a CPU communicator: GPU workers need the NCCL communicator");
}

void Communicator::all_reduce_sum_bf16_on_stream(void*, int64_t, int, void*) {
  DF_FAIL("a bf16 all_reduce needs the NCCL communicator (GPU workers)");
}

void Communicator::reduce_scatter_sum(const float*, float*, int64_t, int, void*) {
  DF_FAIL("this communicator has no reduce_scatter (the sequential reference only all-reduces)");
}

void Communicator::all_gather(const void*, void*, size_t, int, void*) {
  DF_FAIL("this communicator has no all_gather (the sequential reference only all-reduces)");
}

void all_reduce_(Communicator* comm, const Tensor& flat, int rank) {
  if (!comm || comm->world() == 1) return;
  OpScope op("all_reduce");
  check_dtype("all_reduce", flat, DType::f32, "buffer");
  Context& ctx = Context::current();
  float* p = flat.data<float>();
  int64_t n = flat.numel();
  if (ctx.device().is_cpu()) {
    ctx.launch([comm, p, n, rank] { comm->all_reduce_sum(p, n, rank); });
    return;
  }
  if (void* s = ctx.cuda_stream_for_launch()) comm->all_reduce_sum_on_stream(p, n, rank, s);
}

void reduce_scatter_(Communicator* comm, const Tensor& flat, int rank) {
  if (!comm || comm->world() == 1) return;
  OpScope op("reduce_scatter");
  check_dtype("reduce_scatter", flat, DType::f32, "buffer");
  const int world = comm->world();
  DF_CHECK(flat.numel() % world == 0, "reduce_scatter: " << flat.describe() << " does not split into " << world
                                                         << " equal slices");
  Context& ctx = Context::current();
  float* p = flat.data<float>();
  const int64_t count = flat.numel() / world;
  float* recv = p + int64_t(rank) * count;
  if (ctx.device().is_cpu()) {
    ctx.launch([comm, p, recv, count, rank] { comm->reduce_scatter_sum(p, recv, count, rank, nullptr); });
    return;
  }
  if (void* s = ctx.cuda_stream_for_launch()) comm->reduce_scatter_sum(p, recv, count, rank, s);
}

void all_gather_(Communicator* comm, const Tensor& buffer, int rank) {
  if (!comm || comm->world() == 1) return;
  OpScope op("all_gather");
  const int world = comm->world();
  const size_t total = buffer.nbytes();
  DF_CHECK(total % size_t(world) == 0, "all_gather: " << buffer.describe() << " does not split into " << world
                                                      << " equal slices");
  Context& ctx = Context::current();
  uint8_t* p = static_cast<uint8_t*>(buffer.raw());
  const size_t bytes = total / size_t(world);
  const uint8_t* send = p + size_t(rank) * bytes;
  if (ctx.device().is_cpu()) {
    ctx.launch([comm, p, send, bytes, rank] { comm->all_gather(send, p, bytes, rank, nullptr); });
    return;
  }
  if (void* s = ctx.cuda_stream_for_launch()) comm->all_gather(send, p, bytes, rank, s);
}

void all_gather_(Communicator* comm, const Tensor& send, const Tensor& recv, int rank) {
  OpScope op("all_gather");
  const int world = comm ? comm->world() : 1;
  DF_CHECK(recv.nbytes() == send.nbytes() * size_t(world),
           "all_gather: recv " << recv.describe() << " must hold " << world << " times send " << send.describe());
  Context& ctx = Context::current();
  const void* src = send.raw();
  void* dst = recv.raw();
  const size_t bytes = send.nbytes();
  if (ctx.device().is_cpu()) {
    if (world == 1) ctx.launch([src, dst, bytes] { std::memcpy(dst, src, bytes); });
    else ctx.launch([comm, src, dst, bytes, rank] { comm->all_gather(src, dst, bytes, rank, nullptr); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx.cuda_stream_for_launch()) {
    if (world == 1) cuda_backend::memcpy_async(dst, src, bytes, s);
    else comm->all_gather(src, dst, bytes, rank, s);
  }
#endif
}

}  // namespace dflash
