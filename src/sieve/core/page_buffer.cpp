#include "sieve/core/page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace sieve {

PageBuffer::~PageBuffer() {
    if (map_) ::munmap(map_, map_bytes_);
}

PageBuffer::PageBuffer(PageBuffer &&o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

PageBuffer &PageBuffer::operator=(PageBuffer &&o) noexcept {
    std::swap(map_, o.map_);
    std::swap(map_bytes_, o.map_bytes_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
}

Result<PageBuffer> PageBuffer::allocate(size_t bytes) {
    if (bytes == 0) return Status::error("PageBuffer::allocate: 0 bytes requested");
    const size_t rounded = (bytes + k_huge_page - 1) / k_huge_page * k_huge_page;
    if (rounded < bytes) return Status::errorf("PageBuffer::allocate: %zu bytes overflows the address space", bytes);
    // One extra huge page of address space so the start can be aligned; the
    // unused ends are unmapped again.
    const size_t span = rounded + k_huge_page;
    // Not MAP_NORESERVE: the kernel's overcommit check then refuses a size
    // that cannot fit here and then, with an error, instead of a later
    // out-of-memory kill while the weights are copied.
    void *p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return Status::errorf("cannot allocate %.1f MiB: %s", static_cast<double>(bytes) / (1 << 20),
                              std::strerror(errno));
    }
    uint8_t *base = static_cast<uint8_t *>(p);
    uint8_t *aligned = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(base) + k_huge_page - 1) /
                                                   k_huge_page * k_huge_page);
    const size_t head = static_cast<size_t>(aligned - base), tail = span - head - rounded;
    if (head > 0) ::munmap(base, head);
    if (tail > 0) ::munmap(aligned + rounded, tail);
    // Advice only: without THP support the mapping stays usable with 4 KiB pages.
    (void)::madvise(aligned, rounded, MADV_HUGEPAGE);
    PageBuffer b;
    b.map_ = aligned;
    b.map_bytes_ = rounded;
    b.data_ = aligned;
    b.size_ = bytes;
    return b;
}

size_t PageBuffer::huge_page_bytes() const {
    if (!data_) return 0;
    std::FILE *f = std::fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    bool in_ours = false;
    size_t kib = 0;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(map_), hi = lo + map_bytes_;
    while (std::fgets(line, sizeof line, f)) {
        uintptr_t a = 0, b = 0;
        // Mapping header lines start "start-end perms ..." (attribute lines,
        // "Name: value kB", never parse as two hex numbers joined by '-').
        if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &a, &b) == 2) {
            in_ours = a < hi && b > lo;
            continue;
        }
        size_t v = 0;
        if (in_ours && std::sscanf(line, "AnonHugePages: %zu kB", &v) == 1) kib += v;
    }
    std::fclose(f);
    return kib * 1024;
}

}  // namespace sieve
