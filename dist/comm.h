// Collective communication between workers: gradients meet in the update program through a
// communicator. The sum is taken in a fixed order (rank 0, 1, ...), so the result never depends
// on thread timing. CPU: a barrier-and-sum between worker threads; GPU: NCCL.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace dflash {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int world() const = 0;
  // Called by every rank with its own buffer (registered at startup); on return every rank's
  // buffer holds the sum over ranks, added in rank order.
  virtual void all_reduce_sum(float* data, int64_t n, int rank) = 0;
  // GPU communicators: enqueue the all-reduce of a device buffer on a stream (captured into the
  // update program). The default refuses: a CPU communicator cannot reduce GPU memory.
  virtual void all_reduce_sum_on_stream(float* data, int64_t n, int rank, void* stream);
  // The same for a bf16 buffer (the overlapped reduction's optional dtype); GPU only.
  virtual void all_reduce_sum_bf16_on_stream(void* data, int64_t n, int rank, void* stream);
  // recv[0, count) = sum over ranks of send[rank*count, (rank+1)*count), added in rank order on
  // the CPU; send holds world*count floats. In place when recv == send + rank*count.
  // stream: null on the CPU, the capture stream on a GPU.
  virtual void reduce_scatter_sum(const float* send, float* recv, int64_t count, int rank, void* stream);
  // recv[q*bytes, (q+1)*bytes) = rank q's send, for every q. In place when send == recv + rank*bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes, int rank, void* stream);
  // A peer failed: every collective waiting on it returns (NCCL: ncclCommAbort). Thread-safe;
  // returns at once, also while another thread waits in a collective or in abort().
  virtual void abort() {}
  // An error the communicator found by itself (NCCL's async errors); polled by the watchdog.
  virtual std::optional<std::string> async_error() { return std::nullopt; }
};

// A barrier that can be broken: after abort(), every waiting and later arrive_and_wait throws.
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int count) : count_(count) {}
  void arrive_and_wait();
  void abort(const std::string& why);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_, arrived_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;
};

#ifdef DFLASH_NCCL
// GPUs through NCCL: several devices of this process (ncclCommInitAll, one thread each), or
// this process's one device as rank `rank` of a run over processes (ncclCommInitRank with the
// unique id handed out at the rendezvous). The reduction order is NCCL's, fixed for a given set
// of devices, topology and NCCL version; with two ranks every order gives the same sums.
class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const std::vector<int>& devices);
  NcclCommunicator(int device, int rank, int world, const std::string& unique_id);
  ~NcclCommunicator() override;
  // 128 bytes: the id rank 0 creates and the others receive (ncclGetUniqueId).
  static std::string make_unique_id();
  int world() const override { return world_; }
  void all_reduce_sum(float* data, int64_t n, int rank) override;
  void all_reduce_sum_on_stream(float* data, int64_t n, int rank, void* stream) override;
  void all_reduce_sum_bf16_on_stream(void* data, int64_t n, int rank, void* stream) override;
  void reduce_scatter_sum(const float* send, float* recv, int64_t count, int rank, void* stream) override;
  void all_gather(const void* send, void* recv, size_t bytes, int rank, void* stream) override;
  void abort() override;
  std::optional<std::string> async_error() override;

 private:
  void* comm_for(int rank, const char* what) const;
  void warm_up(const std::vector<int>& devices);
  int world_ = 0, first_rank_ = 0;
  std::vector<void*> comms_;  // ncclComm_t of ranks first_rank_, first_rank_ + 1, ...
  // Held only for moments (never across ncclCommAbort, which waits for the CUDA graphs holding
  // this communicator's collectives to be destroyed, possibly by a thread that calls abort()).
  std::mutex abort_mutex_;
  bool aborted_ = false;  // then comms_ belong to the abort thread; nothing else touches them
  struct AbortDone {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  std::shared_ptr<AbortDone> abort_done_ = std::make_shared<AbortDone>();
};
#endif

// Ranks that are threads of one process (CPU workers, or the CPU stand-in for processes). Each
// rank reduces its own slice (reading all ranks' buffers), then every rank copies the whole
// result: two barriers, no allocation. n = 0: taken from the first registered buffer.
class ThreadCommunicator : public Communicator {
 public:
  explicit ThreadCommunicator(int world, int64_t n = 0);
  int world() const override { return world_; }
  // At startup, before any all_reduce: the fixed buffer of each rank.
  void register_buffer(int rank, float* data, int64_t n = -1);
  void all_reduce_sum(float* data, int64_t n, int rank) override;
  void reduce_scatter_sum(const float* send, float* recv, int64_t count, int rank, void* stream) override;
  void all_gather(const void* send, void* recv, size_t bytes, int rank, void* stream) override;
  void abort() override;

 private:
  int world_;
  int64_t n_;
  std::mutex register_mutex_;
  std::vector<float*> buffers_;
  std::vector<const void*> published_;  // each rank's send buffer of the collective in progress
  std::vector<float> result_;
  AbortableBarrier barrier_;
};

// The same fixed-order sum for ranks driven one after another by a single thread (the
// reference that concurrent workers must match): the first rank of a round reduces and writes
// every rank's buffer; the others find the round done.
class SequentialCommunicator : public Communicator {
 public:
  SequentialCommunicator(int world, int64_t n);
  int world() const override { return world_; }
  void register_buffer(int rank, float* data);
  void all_reduce_sum(float* data, int64_t n, int rank) override;

 private:
  int world_;
  int64_t n_;
  int calls_ = 0;
  std::vector<float*> buffers_;
  std::vector<float> result_;
};

// Kernel calls of collectives over fixed tensors, recorded into programs. world == 1 or
// comm == nullptr: all_reduce_ and reduce_scatter_ do nothing, all_gather_ copies.
void all_reduce_(Communicator* comm, const Tensor& flat, int rank);
// In place: flat (world * count f32) -> its rank-th slice holds the sum of every rank's slice.
void reduce_scatter_(Communicator* comm, const Tensor& flat, int rank);
// In place: buffer (world equal slices, any dtype) -> every slice holds its owner's slice.
void all_gather_(Communicator* comm, const Tensor& buffer, int rank);
// recv (world * send bytes) <- every rank's send, in rank order.
void all_gather_(Communicator* comm, const Tensor& send, const Tensor& recv, int rank);

}  // namespace dflash
