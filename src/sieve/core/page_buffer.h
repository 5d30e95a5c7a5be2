// A large, page-aligned, anonymous buffer for weights the forward pass
// streams every step.
//
// The memory is mapped on 2 MiB boundaries and advised for transparent huge
// pages (madvise(MADV_HUGEPAGE), which the kernel's default "madvise" THP mode
// honours). Decode reads every weight byte once per token; with 4 KiB pages
// that is one TLB miss and page walk per 4 KiB of a multi-GB stream, with
// 2 MiB pages one per 2 MiB. Where the kernel gives no huge pages the buffer
// is an ordinary anonymous mapping and works the same, only slower.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sieve/core/status.h"

namespace sieve {

class PageBuffer {
public:
    static constexpr size_t k_huge_page = size_t{2} << 20;

    PageBuffer() = default;
    ~PageBuffer();
    PageBuffer(const PageBuffer &) = delete;
    PageBuffer &operator=(const PageBuffer &) = delete;
    PageBuffer(PageBuffer &&o) noexcept;
    PageBuffer &operator=(PageBuffer &&o) noexcept;

    // bytes > 0. Fails with a Status naming the size when the mapping cannot
    // be made (address space or memory exhausted).
    static Result<PageBuffer> allocate(size_t bytes);

    uint8_t *data() { return data_; }
    const uint8_t *data() const { return data_; }
    size_t size() const { return size_; }
    // Bytes of this buffer backed by huge pages now (from /proc/self/smaps;
    // 0 where that cannot be read).
    size_t huge_page_bytes() const;

private:
    uint8_t *map_ = nullptr;  // what mmap returned
    size_t map_bytes_ = 0;
    uint8_t *data_ = nullptr;  // map_ rounded up to k_huge_page
    size_t size_ = 0;
};

}  // namespace sieve
