#include "runtime/SharedSegment.h"

#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace openreg {
namespace {

size_t page_rounded(size_t nbytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  const size_t n = nbytes == 0 ? 1 : nbytes;
  return (n + page - 1) / page * page;
}

void* map_fd(int fd, size_t length) {
  void* ptr = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return ptr == MAP_FAILED ? nullptr : ptr;
}

}  // namespace

SharedSegment create_shared_segment(size_t nbytes, c10::DeviceIndex device) {
  const std::string name = "openreg:" + std::to_string(static_cast<int>(device));
  const size_t length = page_rounded(nbytes);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0, "openreg: cannot create shared memory for ", nbytes,
              " bytes to share with another process: memfd_create failed (", std::strerror(errno),
              "); raise the open-file limit (ulimit -n) if it is reached");
  void* ptr = nullptr;
  if (ftruncate(fd, static_cast<off_t>(length)) == 0) {
    ptr = map_fd(fd, length);
  }
  if (ptr == nullptr) {
    const int err = errno;
    close(fd);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg:", static_cast<int>(device),
                     " out of memory: cannot map ", nbytes,
                     " bytes of shared memory to share with another process (", std::strerror(err),
                     "); free some memory or raise the size of /dev/shm");
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
