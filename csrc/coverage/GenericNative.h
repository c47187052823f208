#pragma once

// Note [Generic native path]
// How the simulated device computes an operator it has no hand-written kernel
// for, when the active profile says the device has one (Note [Profiles]). A
// real backend would run its own kernel on device memory; openreg runs the
// operator's CPU kernel on device memory, which is host memory (Note [Device
// memory is host memory]):
//   1. every openreg tensor argument becomes a CPU tensor over the same bytes
//      (host_view); openreg generators become their CPU engines and
//      `device=openreg` arguments become cpu;
//   2. while the CPU kernel runs, the CPU allocator hands out openreg device
//      memory on this thread (divert_cpu_allocations below), so every tensor
//      the kernel allocates, its results included, lives in device memory;
//   3. results become openreg tensors over those same bytes; a result that
//      views an argument becomes a view of the original openreg tensor; an
//      argument the kernel resized or restrided (out=, in-place view ops)
//      takes the new storage and shape.
// Steps 1 and 3 are the generic path's side of the loop it shares with the
// fallback (Note [One boxed call, two ways to run it] in BoxedCall.h).
// No byte moves: nothing goes through _copy_from (copies_on_this_thread()
// stays put) and the memory statistics count the results as device memory.
// Only a result the CPU kernel did not allocate on this thread (a cached
// constant, a buffer from another allocator) is copied to the device, through
// the copy path, so that even that case shows in the counters.
//
// The CPU allocator is wrapped (c10::SetCPUAllocator) only while a profile
// with generic kernels is active, and the wrapper diverts allocations only on
// a thread inside a generic call; every other allocation gets CPU memory as
// usual. Code that takes raw memory from the CPU allocator
// (Allocator::raw_allocate) inside such a call is not supported.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

namespace openreg {

// The boxed kernel registered for the operators a profile runs generically.
void generic_native(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Number of generic native calls made so far on the calling thread.
uint64_t generic_calls_on_this_thread() noexcept;

// Installs (true) or removes (false) the CPU allocator wrapper.
void divert_cpu_allocations(bool on);

}  // namespace openreg
