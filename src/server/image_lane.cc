#include "server/image_lane.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace qwen35::server {

ImageLane::ImageLane(ImageLaneOptions opts) : opts_(std::move(opts)) {}

ImageLane::~ImageLane() { stop(); }

bool ImageLane::start_threads() {
  while (int(threads_.size()) < opts_.threads) {
    try {
      auto body = [this] { run(); };
      threads_.push_back(opts_.start_thread ? opts_.start_thread(body) : std::thread(body));
    } catch (const std::system_error& e) {
      // Once per failure streak: the log says how many run, and why not more.
      if (stats_.start_error.empty())
        std::fprintf(stderr, "qwen35 serve: warning: started %d of %d image threads: %s\n",
                     int(threads_.size()), opts_.threads, e.what());
      stats_.start_error = e.what();
      break;
    }
  }
  stats_.threads = int(threads_.size());
  return !threads_.empty();
}

std::optional<ApiError> ImageLane::submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto refuse = [&](ErrorKind kind, std::string why) {
    ++stats_.refused;
    ApiError e = api_error(kind, std::move(why));
    e.retry_after_s = 1;
    return e;
  };
  if (stopping_) return refuse(ErrorKind::kUnavailable, "the server is shutting down");
  if (!start_threads())
    return refuse(ErrorKind::kUnavailable, "the server cannot start a thread to decode images (" +
                                               stats_.start_error + "); retry later");
  // Jobs not yet taken beyond the idle threads (which are about to take them) are the queue.
  if (int(jobs_.size()) >= opts_.queue + (stats_.threads - stats_.busy))
    return refuse(ErrorKind::kRateLimited,
                  "too many requests with images: " + std::to_string(stats_.busy) + " being decoded and " +
                      std::to_string(jobs_.size()) + " waiting (--image-threads, --image-queue); retry");
  jobs_.push_back(std::move(job));
  ++stats_.queued;
  cv_.notify_one();
  return std::nullopt;
}

void ImageLane::wait_gate(std::unique_lock<std::mutex>& lock) {
  std::error_code ec;
  while (!stopping_ && !std::filesystem::exists(opts_.gate_file, ec))
    gate_cv_.wait_for(lock, std::chrono::milliseconds(10));
}

void ImageLane::run() {
  // Decoding is background work beside the engine and the HTTP workers: at nice +10 it takes
  // the cores they leave (Linux niceness is per thread), so images do not slow text requests'
  // steps on a machine whose cores are all busy. Lowering one's own priority needs no privilege.
  setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 10);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left to answer
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    --stats_.queued;
    ++stats_.busy;
    if (!opts_.gate_file.empty()) wait_gate(lock);
    lock.unlock();
    bool threw = false;
    try {
      job();
    } catch (...) {  // the server's jobs answer their own failures; this keeps the thread
      threw = true;
    }
    job = nullptr;  // the request's state goes before the next job starts
    lock.lock();
    --stats_.busy;
    if (threw) ++stats_.failed;
  }
}

void ImageLane::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

ImageLane::Stats ImageLane::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace qwen35::server
