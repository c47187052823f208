#pragma once

// The memory history: what openreg_lab.memory._record_memory_history turns on.
//
// Note [The memory history]
// PyTorch's memory snapshots (torch.cuda.memory._snapshot) list the last
// max_entries actions of the allocator, each with the Python stack that made
// it, and each live block with the stack that allocated it. openreg keeps
// them here, apart from the trace's sessions (Recorder.h), because the two
// want opposite things: a trace keeps the first `capacity` events of a block
// of code and records every op (RecordFunction, about 1.3x a small-op step); a
// history runs for a whole job at a cost a user leaves on, records only the
// allocator's actions, and keeps the newest ones. So:
// * a ring of max_entries fixed-size entries (HistoryEntry, 32 bytes): when
//   full, each new entry overwrites the oldest, and `appended` keeps counting,
//   so appended - kept is the number dropped (the snapshot says it);
// * a stack is a 32-bit id of an interned Python stack (the Python layer,
//   csrc/python/AllocStacks.cpp, walks the frames and interns them: a stack
//   seen before costs a hash lookup and 4 bytes an entry);
// * the stack of each live block, by address, so that a block allocated long
//   before the ring's oldest entry still names its stack (CUDA keeps it in the
//   block).
// Entries are appended under the allocator's device lock, so their order is
// the allocator's, and blocks() reads `appended` under the same lock: a
// snapshot keeps only the entries that happened before the blocks it lists
// were read (Note [A snapshot's blocks and entries agree], snapshot.py).
// Stacks are captured before the allocator takes its lock: walking Python
// frames takes the GIL, and a thread that holds the GIL may be waiting for
// that lock (a tensor freed by Python's reference counting).

#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace openreg::trace {

enum class HistoryAction : int8_t {
  Alloc = 0,
  Free = 1,  // CUDA's free_requested and free_completed at once
  SegmentAlloc = 2,
  SegmentFree = 3,
  Oom = 4,
};

struct HistoryEntry {
  int64_t time_ns;   // Clock.h
  uint64_t address;  // the block's; Oom: the bytes the device had free (CUDA's device_free)
  int64_t size;      // the request, or the segment's size
  uint32_t stack;    // interned stack, 0: none
  int8_t action;     // HistoryAction
  int8_t device;
  int16_t unused;
};
static_assert(sizeof(HistoryEntry) == 32, "see openreg_lab/recording/history.py");

// Which actions get a stack (torch.cuda.memory._record_memory_history's
// `context`): None, "state" (live blocks only), "alloc" (and alloc entries),
// "all" (free entries too).
enum class StackContext : int8_t { None = 0, State = 1, Alloc = 2, All = 3 };

struct HistoryOptions {
  bool enabled = false;
  bool entries = true;  // false for enabled="state": live blocks' stacks only
  uint64_t max_entries = 0;
  StackContext context = StackContext::None;
  uint32_t skip = 0;  // bit (1 << action) set: such entries are not kept
  bool clear = false;
};

// Turns the history on (replacing its options) or off; off clears it, as
// CUDA's does, and so does clear.
void configure_history(const HistoryOptions& options);

// One relaxed load: is a history being recorded?
bool history_on() noexcept;

// The stack of the calling thread for an allocation (free: a free), or 0 when
// the history wants none. Called by the allocator before it locks.
uint32_t memory_stack(bool free = false);

// Appends an entry and keeps the live block's stack (Alloc, Free).
void record_history(HistoryAction action, c10::DeviceIndex device, uint64_t address, int64_t size,
                    uint32_t stack);

// How many entries were appended since the history was (re)started.
uint64_t history_appended() noexcept;

// The stack of the live block at `address` (0: none).
uint32_t block_stack(uint64_t address);

struct HistoryCopy {
  std::vector<HistoryEntry> entries;  // oldest first
  uint64_t appended = 0;              // entries[i] is number appended - size + i
  uint64_t max_entries = 0;
  HistoryOptions options;
};
HistoryCopy read_history();

// What walks the calling thread's Python frames and interns them (set by the
// Python layer); returns 0 for a thread without Python frames.
using StackProvider = uint32_t (*)();
void set_stack_provider(StackProvider provider);

}  // namespace openreg::trace
