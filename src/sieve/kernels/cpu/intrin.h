// <immintrin.h> for the kernels (private to kernels/cpu).
//
// GCC 12's AVX-512 headers build some intrinsics (_mm512_cvtph_ps,
// _mm512_reduce_add_ps, ...) on a self-initialized "undefined" vector, which
// -Wmaybe-uninitialized reports once they are inlined (GCC bug 105593, fixed
// in GCC 13). The warning points into the header, so silencing it for the
// header alone keeps it active for our own code.
#pragma once

#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
