#pragma once

// The lock of a thread's event buffer. Its owner takes it for every event and
// almost never meets anyone there (only a session opening or closing does),
// so an uncontended exchange is all it usually costs: cheaper than a mutex.

#include <atomic>
#include <thread>

namespace openreg::trace {

class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
        std::this_thread::yield();
      }
    }
  }
  void unlock() noexcept {
    locked_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace openreg::trace
