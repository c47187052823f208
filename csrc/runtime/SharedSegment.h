#pragma once

// A shared segment: device memory backed by an anonymous memory file
// (memfd), so another process that receives its file descriptor can map the
// same pages. See Note [Sharing device memory across processes] in
// DeviceAllocator.cpp for who creates, maps and releases one.

#include <c10/core/Device.h>

#include <cstddef>

namespace openreg {

struct SharedSegment {
  void* ptr = nullptr;  // start of the mapping in this process
  size_t length = 0;    // bytes mapped: the segment's size rounded up to whole pages
  int fd = -1;          // the memory file; kept open so the segment can be sent again
};

// The host's page size, and `nbytes` rounded up to whole pages (at least one).
size_t page_size();
size_t page_rounded(size_t nbytes);

// Creates a memory file of `nbytes` (named after `device`) and maps it shared.
// Raises torch.OutOfMemoryError when the host cannot provide it.
SharedSegment create_shared_segment(size_t nbytes, c10::DeviceIndex device);

// Moves the private pages at `ptr` (page-aligned; `nbytes` rounded up to
// whole pages) into a new memory file mapped at that same address: their
// bytes are copied into the file, then the file is mapped over them, so a
// pointer into them stays valid (Note [Sharing device memory across
// processes] in DeviceAllocator.cpp says what a concurrent write may do).
// Raises torch.OutOfMemoryError, leaving the pages private, when the host
// cannot provide the file.
SharedSegment share_in_place(void* ptr, size_t nbytes, c10::DeviceIndex device);

// Maps `nbytes` of the memory file `fd` (received from another process).
// Takes ownership of `fd`; raises a one-line error if the file is smaller
// than `nbytes` or cannot be mapped.
SharedSegment map_shared_segment(int fd, size_t nbytes);

// Unmaps the segment and closes its file. The pages live on while any other
// process still maps them.
void release_shared_segment(const SharedSegment& segment);

}  // namespace openreg
