#pragma once

// Op and Backward events come from PyTorch's RecordFunction: the dispatcher
// announces every operator call at its entry, and autograd every node it
// runs. OpObserver.cpp adds one global callback while a trace is open
// (nothing when none is) and keeps the calls that reach openreg.

#include <cstdint>

namespace openreg::trace {

// Registers the observer's lifecycle with the recorder (call once at import).
void install_op_observer();

// Where the user's code called from, as an interned "file:line" (0 when
// unknown). The Python bindings provide it: the recorder knows no Python.
using SourceProvider = uint32_t (*)();
void set_source_provider(SourceProvider provider);
SourceProvider source_provider();

// Whether the RecordFunction callback is installed now (for tests: a trace
// with ops="kernels" alone must not install it).
bool op_observer_installed();

// For benchmarks/bench_trace.py: while set, the callback stays installed but
// records nothing (the cost of RecordFunction alone, the observer's floor).
void set_empty_callbacks(bool empty);

// For benchmarks/bench_trace.py: while set, traces opened install their
// callback without asking RecordFunction for the call's inputs (no boxing).
// With set_empty_callbacks, the floor of a recorder that reads no argument.
void set_callbacks_without_inputs(bool without);

// For benchmarks/bench_trace.py: while set, traces opened install no callback
// at all, so they record no Op or Backward events, only what the backend's own
// hooks record (copies, casts, allocations, fallbacks): the cost a recorder
// without RecordFunction would start from.
void set_no_op_observer(bool off);

}  // namespace openreg::trace
