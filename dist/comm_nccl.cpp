// The NCCL communicator: devices of one process (ncclCommInitAll) or one device per process
// (ncclCommInitRank), collectives enqueued on the caller's (capture) stream, abort and async errors.
#include "dist/comm.h"

#ifdef DFLASH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace dflash {

namespace {
void check_nccl(ncclResult_t r, const char* what) {
  DF_CHECK(r == ncclSuccess, what << " failed: " << ncclGetErrorString(r)
                                  << " (set NCCL_DEBUG=WARN for details; NVLink multicast must stay off: NCCL_NVLS_ENABLE=0)");
}

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

void default_environment() {
  // NVLink multicast (NVLS) is left off unless the user asked for it: on shared hosts it can take
  // the GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // Connections are made now, with every rank present: NCCL otherwise connects lazily at the first
  // collective, which would wait for the other ranks inside the first rank's graph capture.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
}
}  // namespace

std::string NcclCommunicator::make_unique_id() {
  default_environment();
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

NcclCommunicator::NcclCommunicator(const std::vector<int>& devices) {
  DF_CHECK(!devices.empty(), "NcclCommunicator: no devices");
  default_environment();
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
  for (ncclComm_t c : comms) comms_.push_back(c);
  world_ = int(devices.size());
  first_rank_ = 0;
  warm_up(devices);
}

NcclCommunicator::NcclCommunicator(int device, int rank, int world, const std::string& unique_id) {
  DF_CHECK(unique_id.size() == sizeof(ncclUniqueId), "NcclCommunicator: the NCCL unique id from the rendezvous has "
                                                         << unique_id.size() << " bytes, expected "
                                                         << sizeof(ncclUniqueId) << " (ranks built with different NCCL?)");
  default_environment();
  DF_CHECK(cudaSetDevice(device) == cudaSuccess, "cudaSetDevice(" << device << ") failed");
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  comms_.push_back(comm);
  world_ = world;
  first_rank_ = rank;
  warm_up({device});
}

// One all-reduce with every rank together, before anything is recorded.
void NcclCommunicator::warm_up(const std::vector<int>& devices) {
  std::vector<float*> bufs(devices.size());
  std::vector<cudaStream_t> streams(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    DF_CHECK(cudaSetDevice(devices[r]) == cudaSuccess, "cudaSetDevice(" << devices[r] << ") failed");
    DF_CHECK(cudaMalloc(&bufs[r], 1024 * sizeof(float)) == cudaSuccess, "cudaMalloc for the NCCL warm-up failed");
    DF_CHECK(cudaStreamCreate(&streams[r]) == cudaSuccess, "cudaStreamCreate for the NCCL warm-up failed");
  }
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (size_t r = 0; r < devices.size(); ++r)
    check_nccl(ncclAllReduce(bufs[r], bufs[r], 1024, ncclFloat, ncclSum, as_comm(comms_[r]), streams[r]),
               "ncclAllReduce (warm-up)");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  for (size_t r = 0; r < devices.size(); ++r) {
    cudaSetDevice(devices[r]);
    DF_CHECK(cudaStreamSynchronize(streams[r]) == cudaSuccess, "the NCCL warm-up all-reduce failed");
    cudaStreamDestroy(streams[r]);
    cudaFree(bufs[r]);
  }
}

NcclCommunicator::~NcclCommunicator() {
  bool aborted;
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    aborted = aborted_;
  }
  if (!aborted) {
    for (void* c : comms_) ncclCommDestroy(as_comm(c));
    return;
  }
  // ncclCommAbort frees them once the graphs that captured their collectives are destroyed (the
  // trainer destroys its programs before its communicator); a process that is past waiting has
  // been ended by the rendezvous' exit timer.
  std::unique_lock<std::mutex> lock(abort_done_->mutex);
  abort_done_->cv.wait_for(lock, std::chrono::seconds(10), [&] { return abort_done_->done; });
}

// ncclCommAbort raises the abort flag that the device kernels poll, then waits until every CUDA
// graph holding one of the communicator's collectives is destroyed: called on the thread that
// owns those graphs (or while that thread waits for the caller) it would never return. So it runs
// on a thread of its own.
void NcclCommunicator::abort() {
  std::vector<void*> comms;
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    aborted_ = true;
    comms = comms_;
  }
  std::shared_ptr<AbortDone> done = abort_done_;
  std::thread([comms, done] {
    for (void* c : comms) ncclCommAbort(as_comm(c));
    std::lock_guard<std::mutex> lock(done->mutex);
    done->done = true;
    done->cv.notify_all();
  }).detach();
}

std::optional<std::string> NcclCommunicator::async_error() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return std::nullopt;
  for (void* c : comms_) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(as_comm(c), &state) != ncclSuccess) continue;
    if (state != ncclSuccess && state != ncclInProgress)
      return std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(state) +
             " (set NCCL_DEBUG=WARN for details)";
  }
  return std::nullopt;
}

void* NcclCommunicator::comm_for(int rank, const char* what) const {
  DF_CHECK(rank >= first_rank_ && rank < first_rank_ + int(comms_.size()),
           what << ": rank " << rank << " is not driven by this process (it drives ranks " << first_rank_ << ".."
                << first_rank_ + int(comms_.size()) - 1 << " of " << world_ << ")");
  return comms_[size_t(rank - first_rank_)];
}

void NcclCommunicator::all_reduce_sum(float*, int64_t, int) {
  DF_FAIL("NcclCommunicator reduces device buffers on a stream (all_reduce_sum_on_stream)");
}

void NcclCommunicator::all_reduce_sum_on_stream(float* data, int64_t n, int rank, void* stream) {
  check_nccl(ncclAllReduce(data, data, size_t(n), ncclFloat, ncclSum, as_comm(comm_for(rank, "all_reduce")),
                           as_stream(stream)),
             "ncclAllReduce");
}

void NcclCommunicator::all_reduce_sum_bf16_on_stream(void* data, int64_t n, int rank, void* stream) {
  check_nccl(ncclAllReduce(data, data, size_t(n), ncclBfloat16, ncclSum, as_comm(comm_for(rank, "all_reduce")),
                           as_stream(stream)),
             "ncclAllReduce (bf16)");
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, int64_t count, int rank, void* stream) {
  DF_CHECK(stream, "NcclCommunicator reduces device buffers on a stream");
  check_nccl(ncclReduceScatter(send, recv, size_t(count), ncclFloat, ncclSum, as_comm(comm_for(rank, "reduce_scatter")),
                               as_stream(stream)),
             "ncclReduceScatter");
}

void NcclCommunicator::all_gather(const void* send, void* recv, size_t bytes, int rank, void* stream) {
  DF_CHECK(stream, "NcclCommunicator gathers device buffers on a stream");
  check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, as_comm(comm_for(rank, "all_gather")), as_stream(stream)),
             "ncclAllGather");
}

}  // namespace dflash
#endif
