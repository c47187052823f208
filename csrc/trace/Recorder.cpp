#include "trace/Recorder.h"

#include "trace/KernelEvents.h"

#include <c10/util/Exception.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace openreg::trace {

std::atomic<bool> g_enabled{false};
std::atomic<bool> g_kernel_events{false};

namespace {

constexpr size_t kKeptPool = size_t{1} << 20;  // int64s: 8 MiB per thread at most

struct Session {
  uint64_t capacity;
  Options options;
  uint64_t dropped_at_open;
  struct Start {
    size_t events;
    size_t pool;
  };
  std::map<const ThreadBuffer*, Start> start;  // buffer lengths when opened
};

// The recording shared by all open sessions: Note [One recording, many sessions].
struct Recording {
  std::mutex mutex;  // guards everything below but the atomics
  std::atomic<uint64_t> generation{1};
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> budget{0};
  std::atomic<uint64_t> dropped{0};
  // The union of the open sessions' options, read by writers without the lock.
  std::atomic<bool> record_shapes{false};
  std::atomic<bool> stack{false};
  bool kernel_ops = false;             // every open session asked for kernel_ops
  std::mutex observer_mutex;           // orders the hook calls below (sync_observer)
  bool observer_on = false;            // on_start called last (guarded by observer_mutex)
  std::vector<ThreadBuffer*> buffers;  // of the threads in this recording
  // Every buffer ever made, one per thread that recorded; never freed, so a
  // thread's raw pointer to its own stays valid (an exited thread's buffer is
  // a few empty vectors).
  std::vector<std::unique_ptr<ThreadBuffer>> owned;
  std::map<uint64_t, Session> sessions;
  uint64_t next_session = 1;
  // Sessions with a smaller id were open in the parent when this process
  // forked (Note [The recorder across fork]).
  uint64_t first_own_session = 1;
  // The parent's recording, abandoned at the fork: kept reachable, not freed.
  Recording* parent = nullptr;
  void (*on_start)() = nullptr;
  void (*on_stop)() = nullptr;
};

thread_local ThreadBuffer* tls_buffer = nullptr;  // see Recording::owned

void start_afresh_in_child();

// Leaked, as every Recording: threads may write until exit, and a forked
// child abandons its parent's (Note [The recorder across fork]).
std::atomic<Recording*> g_recording{nullptr};

Recording& recording() {
  static Recording* first = [] {
    auto* r = new Recording();
    g_recording.store(r);
    pthread_atfork(nullptr, nullptr, &start_afresh_in_child);
    return r;
  }();
  (void)first;
  return *g_recording.load(std::memory_order_acquire);
}

// Note [The recorder across fork]
// fork() copies only the calling thread. Another thread may have held its
// buffer's SpinLock or the recording's mutex at that moment (appending an
// event, opening or closing a session): in the child nobody would ever
// release them, and the child's next trace spun or blocked for ever. Taking
// those locks in a prepare handler, as the allocator does (Note [Fork
// safety]), could deadlock: the forking thread holds the GIL, and a writer
// holding its buffer's lock may be waiting for the GIL (python_source, for
// stack=True). So the child starts afresh instead: a new Recording (new
// locks, no buffers, no sessions), the parent's left untouched and leaked,
// since a thread may have been changing it. What the child sees:
// * the recording belongs to the parent, which keeps every event; the child
//   records nothing until it opens a trace of its own, which works as usual;
// * a trace that was open at the fork is closed in the child like any other,
//   and holds no events (SessionResult::inherited; Python warns);
// * the op observer's callback stays installed (RecordFunction's registry is
//   the parent's copy) and is removed as usual when no session wants it.
// The interned strings are kept (Python caches them by id), and their table
// and the event chunk pool are locked around fork() instead: nothing waits
// for anything while holding those, and their handlers, registered when the
// extension loads, take them after the allocator's mutexes (Intern.cpp).
// Caches of dispatch tables (OpLookup.cpp, DispatchPath.cpp) start anew in
// the child if a thread held their lock at the fork.
void start_afresh_in_child() {
  Recording* old = g_recording.load(std::memory_order_relaxed);
  auto* fresh = new Recording();
  fresh->generation = old->generation.load(std::memory_order_relaxed) + 1;
  fresh->next_session = old->next_session;
  fresh->first_own_session = old->next_session;
  fresh->observer_on = old->observer_on;
  fresh->on_start = old->on_start;
  fresh->on_stop = old->on_stop;
  fresh->parent = old;
  g_enabled.store(false);
  g_kernel_events.store(false);
  tls_buffer = nullptr;
  g_recording.store(fresh, std::memory_order_release);
}

}  // namespace

uint64_t events_so_far() noexcept {
  return enabled() ? recording().used.load(std::memory_order_relaxed) : 0;
}

namespace {

ThreadBuffer* register_thread(Recording& r, uint64_t generation) {
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.generation.load() != generation || !g_enabled.load()) {
    return nullptr;
  }
  ThreadBuffer* b = tls_buffer;
  if (b == nullptr) {
    r.owned.push_back(std::make_unique<ThreadBuffer>());
    b = r.owned.back().get();
    b->os_thread = static_cast<uint64_t>(::syscall(SYS_gettid));
    tls_buffer = b;
  }
  std::lock_guard<SpinLock> block(b->lock);
  b->generation = generation;
  b->thread = static_cast<int32_t>(r.buffers.size());
  b->open.reserve(64);
  r.buffers.push_back(b);
  return b;
}

void merge_options(Recording& r) {
  Options o;
  bool all_ops = false;
  for (const auto& [id, s] : r.sessions) {
    o.record_shapes |= s.options.record_shapes;
    o.stack |= s.options.stack;
    all_ops |= !s.options.kernel_ops;
  }
  r.record_shapes = o.record_shapes;
  r.stack = o.stack;
  r.kernel_ops = !r.sessions.empty() && !all_ops;
}

// Brings the op observer and the kernels' op events in line with the open
// sessions. Called after each open and close, outside the recording's lock;
// observer_mutex keeps two threads' calls in order, and each call reads the
// latest state, so the last one wins. While the source changes, ops are
// briefly recorded by neither, never by both.
void sync_observer(Recording& r) {
  std::lock_guard<std::mutex> hooks(r.observer_mutex);
  bool want_observer = false;
  bool want_kernels = false;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    want_kernels = r.kernel_ops;
    want_observer = !r.sessions.empty() && !r.kernel_ops;
  }
  if (!want_kernels) {
    g_kernel_events.store(false);
  }
  if (want_observer && !r.observer_on) {
    if (r.on_start != nullptr) {
      r.on_start();
    }
    r.observer_on = true;
  } else if (!want_observer && r.observer_on) {
    if (r.on_stop != nullptr) {
      r.on_stop();
    }
    r.observer_on = false;
  }
  if (want_kernels) {
    g_kernel_events.store(true);
  }
}

}  // namespace

Writer::Writer() {
  Recording& r = recording();
  const uint64_t generation = r.generation.load(std::memory_order_acquire);
  ThreadBuffer* b = tls_buffer;
  if (b == nullptr || b->generation != generation) {
    b = register_thread(r, generation);
    if (b == nullptr) {
      return;
    }
  }
  lock_ = std::unique_lock<SpinLock>(b->lock);
  // The recording may have ended (and cleared this buffer) since the check.
  if (r.generation.load(std::memory_order_acquire) != b->generation) {
    lock_.unlock();
    return;
  }
  buffer_ = b;
}

Options Writer::options() const noexcept {
  const Recording& r = recording();
  return {r.record_shapes.load(std::memory_order_relaxed), r.stack.load(std::memory_order_relaxed)};
}

int32_t Writer::innermost() const noexcept {
  int32_t op = -1;
  for (auto it = buffer_->open.rbegin(); it != buffer_->open.rend(); ++it) {
    if (it->index >= 0) {
      op = it->index;
      break;
    }
  }
  const int32_t scope = buffer_->scopes.empty() ? -1 : buffer_->scopes.back();
  return std::max(op, scope);  // the later of the two is the inner one
}

int32_t Writer::append(Event e) {
  Recording& r = recording();
  if (r.used.fetch_add(1, std::memory_order_relaxed) >= r.budget.load(std::memory_order_relaxed)) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  e.parent = innermost();
  buffer_->events.push_back(e);
  return static_cast<int32_t>(buffer_->events.size() - 1);
}

void Writer::end_open(uint64_t handle, int64_t end_ns) {
  if (buffer_->open.empty() || buffer_->open.back().handle != handle) {
    return;
  }
  const OpenEvent open = buffer_->open.back();
  buffer_->open.pop_back();
  if (open.index >= 0) {
    Event& e = buffer_->events[open.index];
    e.dur_ns = end_ns - e.start_ns;
  }
}

void set_lifecycle_hooks(void (*on_start)(), void (*on_stop)()) {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.on_start = on_start;
  r.on_stop = on_stop;
}

uint64_t open_session(uint64_t capacity, Options options) {
  TORCH_CHECK_VALUE(capacity > 0, "trace capacity must be a positive number of events, got 0");
  Recording& r = recording();
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    const bool first = r.sessions.empty();
    if (first) {
      r.used = 0;
      r.dropped = 0;
      r.budget = 0;
    }
    Session s{capacity, options, r.dropped.load(), {}};
    for (ThreadBuffer* b : r.buffers) {
      std::lock_guard<SpinLock> block(b->lock);
      s.start[b] = {b->events.size(), b->pool.size()};
    }
    r.budget = std::max(r.budget.load(), r.used.load() + capacity);
    id = r.next_session++;
    r.sessions.emplace(id, std::move(s));
    merge_options(r);
    if (first) {
      g_enabled.store(true);
    }
  }
  sync_observer(r);
  return id;
}

SessionResult close_session(uint64_t id) {
  Recording& r = recording();
  SessionResult out;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.sessions.find(id);
    if (it == r.sessions.end() && id > 0 && id < r.first_own_session) {
      out.inherited = true;  // Note [The recorder across fork]
      return out;
    }
    TORCH_CHECK(it != r.sessions.end(), "trace session ", id, " is not open");
    const Session& s = it->second;
    out.capacity = s.capacity;
    out.options = s.options;
    out.dropped = r.dropped.load() - s.dropped_at_open;
    for (ThreadBuffer* b : r.buffers) {
      std::lock_guard<SpinLock> block(b->lock);
      auto found = s.start.find(b);
      const Session::Start first = found == s.start.end() ? Session::Start{0, 0} : found->second;
      ThreadEvents t{b->thread,
                     b->os_thread,
                     static_cast<int64_t>(first.events),
                     {},
                     static_cast<int64_t>(first.pool),
                     {}};
      b->events.copy_to(t.events, first.events);
      t.pool.assign(b->pool.begin() + static_cast<std::ptrdiff_t>(first.pool), b->pool.end());
      out.threads.push_back(std::move(t));
    }
    r.sessions.erase(it);
    merge_options(r);
    if (r.sessions.empty()) {
      g_enabled.store(false);
      r.generation.fetch_add(1, std::memory_order_release);
      for (ThreadBuffer* b : r.buffers) {
        std::lock_guard<SpinLock> block(b->lock);
        b->events.clear();
        // Keep a modest pool's memory for the next recording (no regrowth).
        if (b->pool.capacity() > kKeptPool) {
          b->pool = {};
        }
        b->pool.clear();
        b->open.clear();
        b->scopes.clear();
      }
      r.buffers.clear();
    }
  }
  sync_observer(r);
  for (ThreadEvents& t : out.threads) {
    resolve_kernel_events(t.events);  // outside the locks: it may read dispatch tables
  }
  return out;
}

namespace {
std::atomic<bool> g_test_holding{false};
std::atomic<bool> g_test_release{false};
}  // namespace

bool hold_locks_for_test(bool recording_mutex, int64_t timeout_ms) {
  Recording& r = recording();
  Writer w;
  if (!w) {
    return false;
  }
  std::unique_lock<std::mutex> lock(r.mutex, std::defer_lock);
  if (recording_mutex) {
    lock.lock();
  }
  g_test_release = false;
  g_test_holding = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!g_test_release.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  g_test_holding = false;
  return true;
}

bool test_holding() noexcept {
  return g_test_holding.load();
}

void release_test_hold() noexcept {
  g_test_release = true;
}

}  // namespace openreg::trace
