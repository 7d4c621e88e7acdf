// The server-wide bound on image memory being decoded (docs/design.md "Image admission"): a
// request reserves what its images will cost (counted from their headers, ImageEncoder::plan)
// before a pixel is decoded, and gives it back when its images are patch rows handed to the
// engine. A reservation that does not fit now is refused, never waited for: the client retries
// (HTTP 429 with Retry-After), so no thread is parked on memory.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace qwen35::runtime {

class ImageBudget {
 public:
  explicit ImageBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  ImageBudget(const ImageBudget&) = delete;
  ImageBudget& operator=(const ImageBudget&) = delete;

  // Bytes held until destroyed (or moved from); empty when the budget had no room.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept : budget_(std::exchange(o.budget_, nullptr)), bytes_(o.bytes_) {}
    Reservation& operator=(Reservation&& o) noexcept {
      if (this != &o) {
        reset();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = o.bytes_;
      }
      return *this;
    }
    ~Reservation() { reset(); }
    explicit operator bool() const { return budget_ != nullptr; }
    void reset() {
      if (budget_) budget_->used_.fetch_sub(bytes_);
      budget_ = nullptr;
    }

   private:
    friend class ImageBudget;
    Reservation(ImageBudget* b, int64_t bytes) : budget_(b), bytes_(bytes) {}
    ImageBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // `bytes` out of the budget when they fit beside what is held now; else an empty reservation.
  Reservation try_reserve(int64_t bytes) {
    int64_t used = used_.load();
    do {
      if (bytes > limit_ - used) return {};
    } while (!used_.compare_exchange_weak(used, used + bytes));
    return Reservation(this, bytes);
  }

  int64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace qwen35::runtime
