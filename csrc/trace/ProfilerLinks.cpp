#include "trace/ProfilerLinks.h"

#include <string_view>
#include <unordered_set>

namespace openreg::trace {
namespace {

// "aten::add.Tensor" is torch.profiler's "aten::add"; a node's name is the same in both.
bool same_op(std::string_view event_name, std::string_view op_name) {
  if (op_name.empty() || !event_name.starts_with(op_name)) {
    return false;
  }
  return event_name.size() == op_name.size() || event_name[op_name.size()] == '.';
}

}  // namespace

void ProfilerLinks::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  pushes_.clear();
  on_.store(true, std::memory_order_release);
}

void ProfilerLinks::stop() {
  on_.store(false, std::memory_order_release);
}

void ProfilerLinks::push(uint64_t id) {
  if (!on_.load(std::memory_order_acquire) || !enabled()) {
    return;
  }
  Push p{id, -1, -1};
  {
    Writer w;
    if (!w || w->open.empty()) {
      return;
    }
    p.thread = w->thread;
    p.position = w->open.back().index;  // -1: the innermost event was dropped
  }
  if (p.position < 0) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pushes_.push_back(p);
}

std::unordered_map<uint64_t, uint64_t> ProfilerLinks::resolve(
    const SessionResult& session, const std::vector<std::string>& strings,
    const std::function<std::string(uint64_t)>& op_name) const {
  std::unordered_map<int32_t, const ThreadEvents*> threads;
  for (const ThreadEvents& t : session.threads) {
    threads[t.thread] = &t;
  }
  std::unordered_map<uint64_t, uint64_t> out;
  std::unordered_set<uint64_t>
      named;  // events a push has found (Note [Which torch.profiler op ...])
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Push& p : pushes_) {
    const uint64_t key = event_key(p.thread, p.position);
    if (!named.insert(key).second) {
      continue;
    }
    auto t = threads.find(p.thread);
    if (t == threads.end()) {
      continue;
    }
    const int64_t i = p.position - t->second->first;
    if (i < 0 || i >= static_cast<int64_t>(t->second->events.size())) {
      continue;  // opened before the session's window
    }
    const Event& e = t->second->events[static_cast<size_t>(i)];
    if (e.kind != static_cast<int8_t>(Kind::Op) && e.kind != static_cast<int8_t>(Kind::Backward)) {
      continue;
    }
    if (e.name < strings.size() && same_op(strings[e.name], op_name(p.id))) {
      out.emplace(key, p.id);
    }
  }
  return out;
}

}  // namespace openreg::trace
