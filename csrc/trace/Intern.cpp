#include "trace/Intern.h"

#include <pthread.h>

#include <deque>
#include <mutex>
#include <unordered_map>

namespace openreg::trace {
namespace {

struct Table {
  std::mutex mutex;
  std::deque<std::string> strings{""};  // deque: views into it stay valid
  std::unordered_map<std::string_view, uint32_t> ids{{strings.front(), 0}};
};

Table& table();

// Note [The recorder across fork] (Recorder.cpp): the child keeps the table
// (Python caches strings by id), so fork() happens between two interns. A
// holder of the mutex waits for nothing else, so the prepare handler cannot
// deadlock.
void lock_for_fork() {
  table().mutex.lock();
}

void unlock_after_fork() {
  table().mutex.unlock();
}

Table& table() {
  static auto* t = [] {
    auto* created = new Table();  // leaked: used by threads until exit
    pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork);
    return created;
  }();
  return *t;
}

// Registered when the extension loads, before the allocator's handlers (made
// with its first allocation): prepare handlers run in the reverse order, so
// this lock is taken after the allocator's, whose holders may wait for it
// (an alloc event appended under the allocator's mutex).
[[maybe_unused]] const bool kForkHandlers = (table(), true);

}  // namespace

uint32_t intern(std::string_view text) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.ids.find(text);
  if (it != t.ids.end()) {
    return it->second;
  }
  const auto id = static_cast<uint32_t>(t.strings.size());
  t.strings.emplace_back(text);
  t.ids.emplace(t.strings.back(), id);
  return id;
}

std::vector<std::string> interned_strings(size_t first) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (first >= t.strings.size()) {
    return {};
  }
  return {t.strings.begin() + static_cast<std::ptrdiff_t>(first), t.strings.end()};
}

}  // namespace openreg::trace
