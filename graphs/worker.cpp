// WorkerThread: a semaphore handshake around a fixed job.
#include "graphs/worker.h"

namespace dflash {

WorkerThread::WorkerThread(std::function<void()> job) : job_(std::move(job)), thread_([this] { loop(); }) {}

WorkerThread::~WorkerThread() {
  stop_ = true;
  go_.release();
  thread_.join();
}

void WorkerThread::start() { go_.release(); }

void WorkerThread::wait() {
  done_.acquire();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void WorkerThread::loop() {
  for (;;) {
    go_.acquire();
    if (stop_) return;
    try {
      job_();
    } catch (...) {
      error_ = std::current_exception();
    }
    done_.release();
  }
}

}  // namespace dflash
