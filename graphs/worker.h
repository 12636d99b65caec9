// A worker thread: it runs one job at a time, handed over by the main thread, without allocating
// or taking a global lock. The job function is fixed at construction and reads whatever the main
// thread prepared before start().
#pragma once
#include <exception>
#include <functional>
#include <semaphore>
#include <thread>

namespace dflash {

class WorkerThread {
 public:
  explicit WorkerThread(std::function<void()> job);
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  void start();  // runs the job once on the worker thread
  void wait();   // blocks until it finished; rethrows the job's error

 private:
  void loop();
  std::function<void()> job_;
  std::binary_semaphore go_{0}, done_{0};
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace dflash
