#pragma once

// Pinned ("page-locked") host memory for openreg.
//
// A real accelerator copies faster from pinned memory; here pinning is simulated
// by page-aligned allocations that the allocator remembers, so is_pinned()
// answers truthfully. Reached through the PrivateUse1 hooks
// (tensor.pin_memory()) and registered as openreg's at::HostAllocator
// (torch.accelerator.memory.empty_host_cache()).

#include <ATen/core/CachingHostAllocator.h>

namespace openreg {

class HostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

  // True when `ptr` points into a live pinned block.
  bool is_pinned(const void* ptr);
};

HostAllocator& host_allocator();

}  // namespace openreg
