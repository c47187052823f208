// Tensor.record_stream(stream) on openreg.
//
// On CUDA, record_stream tells the caching allocator that `stream` uses the
// tensor's memory, so that when the tensor dies its block is not handed out
// again while work queued on `stream` may still read or write it. openreg
// does the same as CUDA's kernel, handing the stream to its allocator
// (DeviceAllocator::recordStream), and that is rightly a no-op: every kernel
// and copy has finished when its call returns (Note [Synchronous execution]
// in runtime/Stream.h), so no stream ever has pending work on a block when it
// is freed, and the device's block cache may give it to any stream at once.
// A vendor whose device runs asynchronously must instead keep a freed block
// out of its cache until the recorded streams have passed that point, as
// CUDA's allocator does with events.

#include "aten/Registration.h"
#include "runtime/DeviceAllocator.h"
#include "runtime/Stream.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

namespace openreg {
namespace {

void record_stream(at::Tensor& self, c10::Stream stream) {
  check_stream(stream);  // an openreg stream this process created, as CUDA requires a CUDA one
  device_allocator().recordStream(self.storage().data_ptr(), stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "record_stream", record_stream);
}

}  // namespace openreg
