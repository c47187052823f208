#pragma once

// Note [The lab's seam]
// The one header through which the template (csrc/runtime, csrc/aten,
// csrc/distributed: the folders a vendor copies) reaches openreg-lab's
// recorder (csrc/trace). Nothing else in those folders includes a trace/
// header (tests/layout/test_layers.py checks it), so what the template asks of the
// recorder is this list, each call costing a relaxed load when no trace is on:
// - kernels: a KernelScope per native kernel, through OPENREG_IMPL
//   (aten/Registration.h) or HostKernel.h's wrappers, and FallbackScope /
//   InternalScope around the CPU fallback (KernelEvents.h, Hooks.h);
// - memory and copies: record_memory from the allocator, with memory_stack
//   before it locks (MemoryHistory.h), record_copy and record_cast from the
//   copy and autocast kernels (Hooks.h);
// - dispatch: describe_dispatch_table for the fallback's profile
//   (DispatchPath.h);
// - collectives: begin_collective / end_collective / record_collective_wait
//   around each collective of the backend and its Work (Collective.h), timed
//   with now_ns (Clock.h).
// A vendor who copies the template keeps csrc/trace and gets openreg-lab's
// traces of their own device, or replaces this header with empty inline
// versions of the same names and drops csrc/trace from the build.

#include "trace/Clock.h"          // IWYU pragma: export
#include "trace/Collective.h"     // IWYU pragma: export
#include "trace/DispatchPath.h"   // IWYU pragma: export
#include "trace/Hooks.h"          // IWYU pragma: export
#include "trace/KernelEvents.h"   // IWYU pragma: export
#include "trace/MemoryHistory.h"  // IWYU pragma: export
