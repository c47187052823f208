#pragma once

// The recorder's one record type. Every decision point of the backend appends
// fixed-size Events to its thread's buffer (Recorder.h); Python reads the
// buffers as a numpy structured array whose layout mirrors this struct
// (openreg_lab/recording/events.py), so the two must change together.

#include <cstdint>

namespace openreg::trace {

enum class Kind : int8_t {
  Op = 0,           // an operator call that reached openreg (RecordFunction)
  Backward = 1,     // an autograd node running; its ops are its children
  Fallback = 2,     // the CPU side of a fallen-back op; its copies are children
  Copy = 3,         // bytes moved by _copy_from (H2D, D2H or D2D)
  Cast = 4,         // one autocast cast of one argument
  Alloc = 5,        // a device allocation
  Free = 6,         // a device free
  Mark = 7,         // an instant: something changed (e.g. a coverage profile)
  Compiled = 8,     // torch.compile: a compiled graph's call, or one generated kernel in it
  Compile = 9,      // torch.compile: compiling one graph, a graph break or a recompile
  Collective = 10,  // a c10d collective, issue to completion (Collective.h)
  Step = 11,        // an instant: a training step ended; seq: the step's number
  Module = 12,      // an nn.Module's forward, recorded when it returns (its path
                    // as name); a span, never the parent of what ran inside
  Segment = 13,     // the allocator took a segment from the host, or gave one
                    // back (name "segment_alloc" / "segment_free")
  Oom = 14,         // an allocation that failed: out of memory
};

enum class Kernel : int8_t {
  None = 0,
  Native = 1,     // a kernel registered for PrivateUse1 ran
  Fallback = 2,   // the boxed CPU fallback ran
  Composite = 3,  // decomposed into other ops (its children)
  Generic = 4,    // the generic native path: a CPU kernel on device memory
};

// Device codes in src/dst/device: an openreg index, or one of these.
constexpr int8_t kCpu = -1;
constexpr int8_t kNoDevice = -2;

enum Flags : uint8_t {
  kCacheHit = 1,  // Cast: served by autocast's weight cache, nothing copied
  kWait = 2,      // Collective: the time a caller blocked in Work::wait
  // Op, only inside the recorder: a native kernel's event whose operator is
  // looked up when its session closes (Note [Kernel events are resolved at
  // close] in KernelEvents.h); no session hands one over with it set.
  kUnresolved = 4,
};

struct Event {
  int64_t start_ns;   // steady clock (Clock.h)
  int64_t dur_ns;     // 0 for instants and events still open at export
  int64_t bytes;      // Copy/Cast: bytes; memory events (Note [Memory events]):
                      // the request, or the segment's size
  int64_t seq;        // Op/Backward: autograd sequence number (-1: none);
                      // memory events: bytes allocated on the device afterwards
  int32_t parent;     // index of the enclosing event in the same buffer, -1
  uint32_t name;      // interned (Intern.h): "aten::add.Tensor", "H2D", ...
  uint32_t dispatch;  // interned dispatch path of an Op; Cast: the argument;
                      // memory events: the block's address, low 32 bits
  uint32_t source;    // interned "file:line" of the user's call (stack=True)
  uint32_t shapes;    // 1 + offset of the Op's shapes in the pool, 0: none
  uint32_t reserved;  // Collective: the group's size; memory events: the
                      // block's address, high 32 bits; else 0
  int8_t kind;
  int8_t kernel;
  int8_t device;
  int8_t src;
  int8_t dst;
  int8_t from_dtype;  // c10::ScalarType, -1: none
  int8_t to_dtype;
  uint8_t flags;
};

// Note [Memory events]
// What the allocator did, one event each: Alloc and Free (a block handed to a
// tensor and back: bytes is what was asked, the block is that rounded up to
// kRoundBytes), Segment (a block taken from the host, "segment_alloc", or
// returned to it, "segment_free": bytes is its size; openreg's allocator
// never splits a segment, so a segment holds one block) and Oom (an
// allocation that failed; address 0). Each names the device and the block's
// address (dispatch | reserved << 32), and seq is the bytes allocated on the
// device afterwards, so the allocated line reads off any of them. These are
// the actions of PyTorch's memory snapshots (torch.cuda.memory._snapshot's
// device_traces): openreg_lab/recording turns them into one.
inline void set_address(Event& e, const void* ptr) {
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  e.dispatch = static_cast<uint32_t>(a & 0xffffffffu);
  e.reserved = static_cast<uint32_t>(static_cast<uint64_t>(a) >> 32);
}

static_assert(sizeof(Event) == 64,
              "Event must stay 64 bytes (see openreg_lab/recording/events.py)");

// An event of `kind` from `start_ns` that names no device, dtype or autograd
// sequence number yet: each recorder fills in what it knows.
inline Event blank_event(Kind kind, int64_t start_ns) {
  Event e{};
  e.start_ns = start_ns;
  e.kind = static_cast<int8_t>(kind);
  e.device = e.src = e.dst = kNoDevice;
  e.from_dtype = e.to_dtype = -1;
  e.seq = -1;
  return e;
}

}  // namespace openreg::trace
