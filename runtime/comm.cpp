// Thread and sequential communicators: the same rank-ordered sum, with and without threads.
#include "runtime/comm.h"

#include <cstdlib>
#include <cstring>

#include "runtime/context.h"
#ifdef DFLASH_NCCL
#include <nccl.h>
#endif
#include "runtime/error.h"

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
}  // namespace

ThreadCommunicator::ThreadCommunicator(int world, int64_t n)
    : world_(world), n_(n), buffers_(size_t(world), nullptr), result_(size_t(n)), barrier_(world) {
  DF_CHECK(world >= 1, "ThreadCommunicator: world must be at least 1");
}

void ThreadCommunicator::register_buffer(int rank, float* data) { buffers_.at(size_t(rank)) = data; }

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

#ifdef DFLASH_NCCL
namespace {
void check_nccl(ncclResult_t r, const char* what) {
  DF_CHECK(r == ncclSuccess, what << " failed: " << ncclGetErrorString(r)
                                  << " (set NCCL_DEBUG=WARN for details; NVLink multicast must stay off: NCCL_NVLS_ENABLE=0)");
}
}  // namespace

NcclCommunicator::NcclCommunicator(const std::vector<int>& devices) {
  DF_CHECK(!devices.empty(), "NcclCommunicator: no devices");
  // NVLink multicast (NVLS) is left off unless the user asked for it: on shared hosts it can take
  // the GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // Connections are made now, with every rank present: NCCL otherwise connects lazily at the first
  // collective, which would wait for the other ranks inside the first rank's graph capture.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
  for (ncclComm_t c : comms) comms_.push_back(c);
  // One all-reduce with every rank together, before anything is recorded.
  std::vector<float*> bufs(devices.size());
  std::vector<cudaStream_t> streams(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    DF_CHECK(cudaSetDevice(devices[r]) == cudaSuccess, "cudaSetDevice(" << devices[r] << ") failed");
    DF_CHECK(cudaMalloc(&bufs[r], 1024 * sizeof(float)) == cudaSuccess, "cudaMalloc for the NCCL warm-up failed");
    DF_CHECK(cudaStreamCreate(&streams[r]) == cudaSuccess, "cudaStreamCreate for the NCCL warm-up failed");
  }
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (size_t r = 0; r < devices.size(); ++r)
    check_nccl(ncclAllReduce(bufs[r], bufs[r], 1024, ncclFloat, ncclSum, comms[r], streams[r]), "ncclAllReduce (warm-up)");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  for (size_t r = 0; r < devices.size(); ++r) {
    cudaSetDevice(devices[r]);
    DF_CHECK(cudaStreamSynchronize(streams[r]) == cudaSuccess, "the NCCL warm-up all-reduce failed");
    cudaStreamDestroy(streams[r]);
    cudaFree(bufs[r]);
  }
}

NcclCommunicator::~NcclCommunicator() {
  for (void* c : comms_) ncclCommDestroy(static_cast<ncclComm_t>(c));
}

void NcclCommunicator::all_reduce_sum(float*, int64_t, int) {
  DF_FAIL("NcclCommunicator reduces device buffers on a stream (all_reduce_sum_on_stream)");
}

void NcclCommunicator::all_reduce_sum_on_stream(float* data, int64_t n, int rank, void* stream) {
  DF_CHECK(rank >= 0 && size_t(rank) < comms_.size(), "all_reduce: rank " << rank << " outside the world of " << comms_.size());
  check_nccl(ncclAllReduce(data, data, size_t(n), ncclFloat, ncclSum, static_cast<ncclComm_t>(comms_[size_t(rank)]),
                           static_cast<cudaStream_t>(stream)),
             "ncclAllReduce");
}
#endif

}  // namespace dflash
