// A minimal fork-join loop: items are handed out through an atomic counter to `threads` workers
// (the caller's thread included). The first exception thrown by any item is rethrown.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qmoe::cpu {

inline void parallel_for(int threads, int64_t num_items, const std::function<void(int64_t item, int worker)>& fn) {
  if (num_items <= 0) return;
  const int workers = static_cast<int>(std::min<int64_t>(std::max(threads, 1), num_items));
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run = [&](int worker) {
    for (int64_t item = next++; item < num_items; item = next++) {
      try {
        fn(item, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = num_items;  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(run, w);
  run(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace qmoe::cpu
