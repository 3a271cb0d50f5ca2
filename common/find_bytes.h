// Scanning a buffer for the first of two byte values: the inner loop of the JSON navigator's string
// skip (quote or backslash) and of the SSE parser's line split (LF or CR), both of which see every
// byte of a request or stream.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvgate {

// The first byte in [p, end) equal to `a` or `b`, or `end`: sixteen bytes at a time where the
// buffer allows (SSE2), then one by one.
inline const char* FindEitherByte(const char* p, const char* end, char a, char b) {
#if defined(__SSE2__)
  const __m128i va = _mm_set1_epi8(a);
  const __m128i vb = _mm_set1_epi8(b);
  for (; end - p >= 16; p += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const int mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(bytes, va), _mm_cmpeq_epi8(bytes, vb)));
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
  }
#endif
  for (; p != end; ++p) {
    if (*p == a || *p == b) return p;
  }
  return end;
}

}  // namespace kvgate
