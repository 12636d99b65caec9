// Collective communication between workers: gradients meet in the update program through a
// communicator. The sum is taken in a fixed order (rank 0, 1, ...), so the result never depends
// on thread timing. CPU: a barrier-and-sum between worker threads; GPU: NCCL.
#pragma once
#include <barrier>
#include <cstdint>
#include <memory>
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
};

#ifdef DFLASH_NCCL
// Several GPUs of one process through NCCL (one communicator per device, made together). The
// reduction order is NCCL's, fixed for a given set of devices and NCCL version.
class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const std::vector<int>& devices);
  ~NcclCommunicator() override;
  int world() const override { return int(comms_.size()); }
  void all_reduce_sum(float* data, int64_t n, int rank) override;
  void all_reduce_sum_on_stream(float* data, int64_t n, int rank, void* stream) override;

 private:
  std::vector<void*> comms_;  // ncclComm_t per rank
};
#endif

// Worker threads of one process. Each rank reduces its own slice (reading all ranks' buffers),
// then every rank copies the whole result: two barriers, no locks, no allocation.
class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(int world, int64_t n);
  int world() const override { return world_; }
  // At startup, before any all_reduce: the fixed buffer of each rank.
  void register_buffer(int rank, float* data);
  void all_reduce_sum(float* data, int64_t n, int rank) override;

 private:
  int world_;
  int64_t n_;
  std::vector<float*> buffers_;
  std::vector<float> result_;
  std::barrier<> barrier_;
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

// The kernel call that all-reduces a rank's flat f32 buffer (recorded into the update program).
// world == 1 or comm == nullptr: nothing.
void all_reduce_(Communicator* comm, const Tensor& flat, int rank);

}  // namespace dflash
