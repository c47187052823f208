#pragma once

// Note [Op events from openreg's kernels]
// By default op events come from RecordFunction (OpObserver.h): every
// operator call, composites and autograd nodes included, at the price of
// RecordFunction existing for every call of the process while a trace is
// open (benchmarks/bench_trace.py: about 1.11x a small-op training step, with
// the inputs boxed, before the recorder does anything: Note [The op
// observer's hot path]). trace(ops="kernels") installs no callback; the op
// events come from the places where openreg itself runs an operator:
// - every native kernel, wrapped at registration by OPENREG_IMPL
//   (aten/Registration.h) in a KernelScope (aten/KernelScopes.h);
// - the boxed CPU fallback (and the sparse, quantized and nested ones), in a
//   KernelScope of the operator it runs.
// These are the events of the default mode whose kernel is native, generic or
// fallback, with the same names, shapes and devices. Not recorded: composite
// operators (aten::linear around its addmm), calls that end in another
// backend, autograd nodes (Backward events; the ops a backward pass runs are
// recorded), and kernels registered for PrivateUse1 from outside openreg
// (torch.library, from Python or C++): the default mode counts those as
// native, here only the ops they call are seen. An event's dispatch path is the one from its
// kernel's own dispatch (e.g. "PrivateUse1"), since the keys above it have already been passed by
// then, and its autograd sequence number is -1. When no trace is open, or RecordFunction is the
// source, a kernel pays one relaxed load (kernel_events(), Recorder.h).

//
// Note [Kernel events are resolved at close]
// A native kernel's event records only what the call alone knows: its
// kernel's name (the address of "add.Tensor"), the key set the call was
// dispatched with, its device, shapes and times. Which operator that is, its
// dispatch path and kernel (native, generic, fallback) are looked up when the
// session closes (resolve_kernel_events), once per operator and key set,
// rather than inside the traced step: on bench_trace.py's MLP step that
// lookup inside the step (the thread's operator cache, the stale-table check,
// the path) was about 0.9% of the step's time, out of about 4% for the
// kernels' events. The path is read from the dispatch table at close, so a
// kernel registered or removed for PrivateUse1 while the trace was open shows
// in the events of the whole trace; a native kernel's own event is native in
// either table. The boxed fallback's events are resolved when they are
// recorded, as RecordFunction's are (OpObserver.cpp).

#include "runtime/Seam.h"
#include "trace/Recorder.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/FunctionRef.h>

#include <vector>

namespace openreg::trace {

// The kernel hooks of the lab's table (Note [The lab's seam] in
// runtime/Seam.h), called by the template's KernelScope only while
// kernel_events() is on.

// Opens the Op event of a native kernel registered under `name`
// ("add.Tensor", an aten operator; the name's address identifies it).
void kernel_begin(seam::Scope& scope, const char* name,
                  c10::function_ref<void(seam::ArgSink&)> args);

// Opens the Op event of the boxed fallback running `op` on `stack`: none
// when a native kernel of the same operator handed its call over (that
// kernel's event is the op's).
void kernel_begin_boxed(seam::Scope& scope, const c10::OperatorHandle& op,
                        const torch::jit::Stack& stack);

// Closes the event `scope` opened.
void kernel_end(seam::Scope& scope);

// Gives the native kernels' events among `events` their operator's name,
// dispatch path and kernel (Note [Kernel events are resolved at close]);
// close_session calls it on what a session takes.
void resolve_kernel_events(std::vector<Event>& events);

}  // namespace openreg::trace
