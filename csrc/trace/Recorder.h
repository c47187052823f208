#pragma once

// The recorder: an on/off switch, per-thread append-only buffers of Events,
// and the sessions (one per Python `trace()`) that read them.
//
// Note [One recording, many sessions]
// While at least one session is open, every thread that reaches a decision
// point appends to its own buffer (registered on first use, under a lock
// taken once per thread). A session is a window over those buffers: it
// remembers each buffer's length when it opened and, when it closes, takes
// the events appended since. Nested traces and traces opened by two threads
// at once therefore see the same events in the overlap, recorded once. The
// buffers are cleared when the last session closes; a generation number makes
// late writers from before that point drop their event instead of writing
// into the next recording.
//
// Capacity: a recording accepts events while fewer than its budget have been
// appended (the largest capacity asked by an open session); the rest are
// counted as dropped, never silently lost. Each session also keeps at most its
// own capacity and counts the excess as dropped.
//
// Cost: when no session is open each decision point pays one relaxed atomic
// load (enabled()). When on, an event is a lock of the thread's own,
// uncontended lock (SpinLock.h) and a 64-byte append (EventStore.h).

#include "trace/Event.h"
#include "trace/EventStore.h"
#include "trace/SpinLock.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace openreg::trace {

extern std::atomic<bool> g_enabled;

inline bool enabled() noexcept {
  return g_enabled.load(std::memory_order_relaxed);
}

struct Options {
  bool record_shapes = false;
  bool stack = false;
  // Op events from openreg's own kernels instead of RecordFunction
  // (Note [Op events from openreg's kernels]); a recording takes them from
  // RecordFunction while any open session wants every op.
  bool kernel_ops = false;
};

// True while a recording is on and takes its op events from openreg's
// kernels (KernelEvents.h): one relaxed load for each kernel call.
extern std::atomic<bool> g_kernel_events;

inline bool kernel_events() noexcept {
  return g_kernel_events.load(std::memory_order_relaxed);
}

// An open Op or Backward event, matched to its end by the address of its
// RecordFunction (Note [The op observer's hot path]; a Backward event outlives
// it: Note [A backward node ends with its hooks]). index is -1 when the event
// was dropped.
struct OpenEvent {
  int32_t index;
  uint64_t handle;
};

struct ThreadBuffer {
  SpinLock lock;
  uint64_t generation = 0;
  int32_t thread = 0;      // 0, 1, 2, ... in order of first event
  uint64_t os_thread = 0;  // gettid()
  EventStore events;
  std::vector<int64_t> pool;    // shapes and dtypes of Op arguments
  std::vector<OpenEvent> open;  // Op/Backward events not ended yet
  std::vector<int32_t> scopes;  // open Fallback events
};

// The calling thread's buffer, locked; false when no recording is on (or it
// ended while this thread was getting here).
class Writer {
 public:
  Writer();
  explicit operator bool() const noexcept {
    return buffer_ != nullptr;
  }
  ThreadBuffer* operator->() const noexcept {
    return buffer_;
  }
  Options options() const noexcept;

  // Appends `e` (parent = innermost open Op/Backward/Fallback). Returns its
  // index, or -1 if the recording is full (counted as dropped).
  int32_t append(Event e);
  int32_t innermost() const noexcept;

  // Ends the innermost open Op/Backward event at `end_ns` if it is
  // `handle`'s; nothing otherwise (the recording it started in has ended).
  void end_open(uint64_t handle, int64_t end_ns);

 private:
  std::unique_lock<SpinLock> lock_;
  ThreadBuffer* buffer_ = nullptr;
};

// Events of one thread inside a session's window, and the part of the shapes
// pool they wrote (Note [A session costs its window]).
struct ThreadEvents {
  int32_t thread;
  uint64_t os_thread;
  int64_t first;  // buffer index of events[0] (parents are buffer indices)
  std::vector<Event> events;
  int64_t pool_first;  // pool index of pool[0] (Event::shapes are pool indices + 1)
  std::vector<int64_t> pool;
};

struct SessionResult {
  std::vector<ThreadEvents> threads;
  uint64_t dropped = 0;  // by the recording while the session was open
  uint64_t capacity = 0;
  Options options;
  // The session was open when this process forked from its parent, which
  // keeps its events (Note [The recorder across fork] in Recorder.cpp).
  bool inherited = false;
};

// Note [A session costs its window]
// Opening a session notes each buffer's event and pool lengths; closing it
// copies what was appended since, and nothing older: a one-step trace inside
// a long recording costs that step, not the recording. (Interned strings are
// handed over the same way: Python asks only for the ids it has not seen,
// see interned_strings.)
uint64_t open_session(uint64_t capacity, Options options);
SessionResult close_session(uint64_t id);

// Events appended to the current recording so far, kept or dropped (0 when no
// session is open): one relaxed load, cheap enough for a progress display.
uint64_t events_so_far() noexcept;

// Called when the open sessions start / stop wanting every op call from
// RecordFunction: the first session that does not ask for kernel_ops opens,
// or the last one closes (OpObserver.cpp adds and removes its callback here).
void set_lifecycle_hooks(void (*on_start)(), void (*on_stop)());

// For tests of Note [The recorder across fork]: the calling thread takes its
// buffer's lock (a recording must be on) and, if `recording_mutex`, the
// recording's mutex, and holds them until release_test_hold() or the
// timeout; test_holding() is true meanwhile. False if no recording is on.
bool hold_locks_for_test(bool recording_mutex, int64_t timeout_ms);
bool test_holding() noexcept;
void release_test_hold() noexcept;

}  // namespace openreg::trace
