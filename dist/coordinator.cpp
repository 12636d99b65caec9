// Coordinator helpers and the coordinator of ranks that are threads.
#include "dist/coordinator.h"

#include "runtime/error.h"

namespace dflash {

namespace {
std::string shorten(const std::string& s) { return s.size() <= 400 ? s : s.substr(0, 400) + "..."; }

// The first line where a and b differ, for messages about multi-line descriptions.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t pos = 0;
  while (pos < a.size() || pos < b.size()) {
    size_t ea = a.find('\n', pos), eb = b.find('\n', pos);
    std::string la = a.substr(pos, ea == std::string::npos ? std::string::npos : ea - pos);
    std::string lb = b.substr(pos, eb == std::string::npos ? std::string::npos : eb - pos);
    if (la != lb || ea != eb) return "rank 0 has \"" + shorten(lb) + "\", it has \"" + shorten(la) + "\"";
    if (ea == std::string::npos) break;
    pos = ea + 1;
  }
  return "rank 0 has \"" + shorten(b) + "\", it has \"" + shorten(a) + "\"";
}
}  // namespace

void Coordinator::check_same(const std::string& mine, const std::string& what) {
  std::vector<std::string> all = all_gather(mine);
  for (size_t r = 1; r < all.size(); ++r)
    DF_CHECK(all[r] == all[0], "rank " << r << " differs from rank 0 in " << what << ": "
                                       << first_difference(all[r], all[0])
                                       << "; fix: start every rank with the same build, config and data");
}

class ThreadCoordinator::Handle : public Coordinator {
 public:
  Handle(ThreadCoordinator& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.world_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    std::unique_lock<std::mutex> lock(s_.mutex_);
    if (s_.failure_) DF_FAIL(*s_.failure_);
    s_.slots_[size_t(rank_)] = mine;
    if (++s_.arrived_ == s_.world_) {
      s_.result_ = s_.slots_;
      s_.arrived_ = 0;
      ++s_.generation_;
      s_.cv_.notify_all();
      return s_.result_;
    }
    const uint64_t gen = s_.generation_;
    s_.cv_.wait(lock, [&] { return s_.generation_ != gen || s_.failure_; });
    if (s_.generation_ == gen) DF_FAIL(*s_.failure_);
    return s_.result_;
  }

  void report_failure(const std::string& message) override {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    if (!s_.failure_) s_.failure_ = "rank " + std::to_string(rank_) + " stopped: " + message;
    s_.cv_.notify_all();
  }

  std::optional<std::string> failure() const override {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    return s_.failure_;
  }

 private:
  ThreadCoordinator& s_;
  int rank_;
};

ThreadCoordinator::ThreadCoordinator(int world) : world_(world), slots_(size_t(world)) {
  DF_CHECK(world >= 1, "ThreadCoordinator: world " << world << " must be at least 1");
  for (int r = 0; r < world; ++r) handles_.push_back(std::make_unique<Handle>(*this, r));
}

ThreadCoordinator::~ThreadCoordinator() = default;

Coordinator& ThreadCoordinator::handle(int rank) { return *handles_.at(size_t(rank)); }

}  // namespace dflash
