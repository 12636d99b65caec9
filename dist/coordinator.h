// The control plane of a run spread over several processes: small host messages between ranks
// (agreement checks at startup, the barrier around a sharded checkpoint, where to resume). No
// tensor data moves here; tensors move through a Communicator (NCCL between processes). A rank
// that fails makes every waiting call on the others throw, naming it, instead of waiting forever.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dflash {

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank passes its string and receives all of them, in rank order.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  // This rank stops with an error: the others stop too, naming it and `message`.
  virtual void report_failure(const std::string& message) = 0;
  // The first failure seen (this rank's or another's), if any.
  virtual std::optional<std::string> failure() const = 0;

  void barrier() { (void)all_gather(std::string()); }
  std::string broadcast(const std::string& from_rank0) { return all_gather(from_rank0)[0]; }
  // Every rank's `mine` must equal rank 0's; otherwise every rank throws the same error naming
  // `what`, the first rank that differs and both values.
  void check_same(const std::string& mine, const std::string& what);
};

// One process, no peers.
class LocalCoordinator : public Coordinator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
  void report_failure(const std::string&) override {}
  std::optional<std::string> failure() const override { return std::nullopt; }
};

// `world` ranks that are threads of one process (tests and the CPU stand-in for processes):
// handle(r) is rank r's coordinator; all handles share one state.
class ThreadCoordinator {
 public:
  explicit ThreadCoordinator(int world);
  ~ThreadCoordinator();
  Coordinator& handle(int rank);

 private:
  class Handle;
  friend class Handle;
  std::mutex mutex_;
  std::condition_variable cv_;
  int world_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::string> slots_, result_;
  std::optional<std::string> failure_;
  std::vector<std::unique_ptr<Handle>> handles_;
};

}  // namespace dflash
