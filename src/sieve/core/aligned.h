// Cache-line / SIMD aligned heap buffers for activations and scratch.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace sieve {

template <class T>
class AlignedBuffer {
public:
    static constexpr size_t k_align = 64;
    AlignedBuffer() = default;
    explicit AlignedBuffer(size_t n) { resize(n); }
    ~AlignedBuffer() { std::free(data_); }
    AlignedBuffer(const AlignedBuffer &) = delete;
    AlignedBuffer &operator=(const AlignedBuffer &) = delete;
    AlignedBuffer(AlignedBuffer &&o) noexcept : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    AlignedBuffer &operator=(AlignedBuffer &&o) noexcept {
        std::swap(data_, o.data_);
        std::swap(n_, o.n_);
        return *this;
    }

    // Contents are not preserved.
    void resize(size_t n) {
        if (n == n_) return;
        std::free(data_);
        data_ = nullptr;
        n_ = 0;
        if (n == 0) return;
        size_t bytes = (n * sizeof(T) + k_align - 1) / k_align * k_align;
        data_ = static_cast<T *>(std::aligned_alloc(k_align, bytes));
        if (!data_) throw std::bad_alloc();
        n_ = n;
    }
    T *data() { return data_; }
    const T *data() const { return data_; }
    size_t size() const { return n_; }
    T &operator[](size_t i) { return data_[i]; }
    const T &operator[](size_t i) const { return data_[i]; }

private:
    T *data_ = nullptr;
    size_t n_ = 0;
};

}  // namespace sieve
