#pragma once

// Streams of the simulated device.
//
// Note [Synchronous execution]
// openreg runs every kernel and copy on the calling thread, to completion,
// before the call returns. Streams and events keep their full API (ids, the
// current stream per thread and device, record/wait/query/elapsed_time) so
// that code written for an asynchronous accelerator runs unchanged, but no
// work is ever pending: a stream is always idle, an event is complete as soon
// as it is recorded, and waiting never blocks. Event timestamps are taken
// from the host's steady clock at record time.

#include <c10/core/Stream.h>

namespace openreg {

// Stream 0 of each device is its default stream.
constexpr c10::StreamId kDefaultStreamId = 0;

c10::Stream default_stream(c10::DeviceIndex device);

// A stream never handed out before on `device`.
c10::Stream new_stream(c10::DeviceIndex device, int priority);

// The calling thread's current stream on `device` (initially the default).
c10::Stream current_stream(c10::DeviceIndex device);

// Makes `stream` current on its device for this thread; returns the previous.
c10::Stream exchange_stream(c10::Stream stream);

// Throws unless `stream` is an openreg stream this process created.
void check_stream(const c10::Stream& stream);

// Priorities accepted by new_stream: 0 (default) and -1 (high), as on CUDA.
int stream_priority(const c10::Stream& stream);

}  // namespace openreg
