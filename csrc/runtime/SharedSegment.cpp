#include "runtime/SharedSegment.h"

#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace openreg {
namespace {

void* map_fd(int fd, size_t length) {
  void* ptr = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return ptr == MAP_FAILED ? nullptr : ptr;
}

// A memory file of `length` bytes for `nbytes` of `device`; raises when the
// host has no file descriptor left.
int new_memory_file(size_t nbytes, size_t length, c10::DeviceIndex device) {
  const std::string name = "openreg:" + std::to_string(static_cast<int>(device));
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0, "openreg: cannot create shared memory for ", nbytes,
              " bytes to share with another process: memfd_create failed (", std::strerror(errno),
              "); raise the open-file limit (ulimit -n) if it is reached");
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

[[noreturn]] void out_of_shared_memory(size_t nbytes, c10::DeviceIndex device, int err) {
  TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg:", static_cast<int>(device),
                   " out of memory: cannot map ", nbytes,
                   " bytes of shared memory to share with another process (", std::strerror(err),
                   "); free some memory or raise the size of /dev/shm");
}

// Writes `length` bytes from `src` at the start of the file `fd`.
bool write_all(int fd, const void* src, size_t length) {
  const auto* bytes = static_cast<const char*>(src);
  size_t done = 0;
  while (done < length) {
    const ssize_t n = pwrite(fd, bytes + done, length - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

size_t page_size() {
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  return page;
}

size_t page_rounded(size_t nbytes) {
  const size_t page = page_size();
  const size_t n = nbytes == 0 ? 1 : nbytes;
  return (n + page - 1) / page * page;
}

SharedSegment create_shared_segment(size_t nbytes, c10::DeviceIndex device) {
  const size_t length = page_rounded(nbytes);
  const int fd = new_memory_file(nbytes, length, device);
  void* ptr = fd >= 0 ? map_fd(fd, length) : nullptr;
  if (ptr == nullptr) {
    const int err = errno;
    if (fd >= 0) {
      close(fd);
    }
    out_of_shared_memory(nbytes, device, err);
  }
  return {ptr, length, fd};
}

SharedSegment share_in_place(void* ptr, size_t nbytes, c10::DeviceIndex device) {
  const size_t length = page_rounded(nbytes);
  const int fd = new_memory_file(nbytes, length, device);
  if (fd < 0 || !write_all(fd, ptr, length)) {
    const int err = errno;
    if (fd >= 0) {
      close(fd);
    }
    out_of_shared_memory(nbytes, device, err);
  }
  // One step for the other threads: the kernel swaps the pages under its
  // lock of the address space, so an access finds either the private page or
  // the file's, never a hole.
  if (mmap(ptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    const int err = errno;
    // Kernels before 6.12 may unmap the range before failing: then map it
    // again, privately, with the bytes the file holds.
    // At least one entry: GCC cannot tell that `length` is a whole number of
    // pages, and warns of a write to an empty vector (-Wstringop-overflow).
    std::vector<unsigned char> resident(std::max<size_t>(length / page_size(), 1));
    if (mincore(ptr, length, resident.data()) != 0 && errno == ENOMEM) {
      void* back =
          mmap(ptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      TORCH_CHECK(back != MAP_FAILED && pread(fd, ptr, length, 0) == static_cast<ssize_t>(length),
                  "openreg: lost the pages of a block while sharing it (", std::strerror(err), ")");
    }
    close(fd);
    out_of_shared_memory(nbytes, device, err);
  }
  return {ptr, length, fd};
}

SharedSegment map_shared_segment(int fd, size_t nbytes) {
  const size_t length = page_rounded(nbytes);
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < length) {
    close(fd);
    TORCH_CHECK(false, "openreg: the shared memory received from another process is smaller (",
                static_cast<long long>(st.st_size), " bytes) than the storage it should hold (",
                nbytes, " bytes): it was not sent by openreg");
  }
  void* ptr = map_fd(fd, length);
  if (ptr == nullptr) {
    const int err = errno;
    close(fd);
    TORCH_CHECK(false, "openreg: cannot map ", nbytes,
                " bytes of shared memory received from another process (", std::strerror(err), ")");
  }
  return {ptr, length, fd};
}

void release_shared_segment(const SharedSegment& segment) {
  munmap(segment.ptr, segment.length);
  close(segment.fd);
}

}  // namespace openreg
