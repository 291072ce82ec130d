/* CRC-32 (zlib's: reflected polynomial 0xEDB88320, pre/post inverted), bit-identical
 * to zlib's crc32(), folded 64 bytes at a time with carry-less multiplication
 * (PCLMULQDQ) on x86-64 CPUs that have it; everything else, and the last < 16 bytes,
 * goes to zlib's crc32. The folding is the one of "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction" (Gopal, Ozturk et al., Intel, 2009) with the
 * constants its appendix gives for this polynomial, as Chromium's zlib (crc32_simd.c)
 * uses them. tests/kernels/test_encode_kernel.py checks it against zlib. */
#ifndef MQ_CRC32_FOLD_H
#define MQ_CRC32_FOLD_H

#include <stdint.h>
#include <stddef.h>
#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MQ_CRC_FOLD 1

__attribute__((target("sse4.1,pclmul"))) static uint32_t mq_crc32_fold64(const unsigned char *buf, size_t len,
                                                                         uint32_t crc) {
    /* len >= 64 and a multiple of 16; crc and the result are the inverted (internal) value. */
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    /* fold the four lanes into one */
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 -> 64 bits */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static int mq_crc_fold_ok = -1; /* -1 not checked yet; set once, before the GIL is released */

static inline int mq_crc_fold_init(void) {
    if (mq_crc_fold_ok < 0) {
        __builtin_cpu_init();
        mq_crc_fold_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return mq_crc_fold_ok;
}
#else
static inline int mq_crc_fold_init(void) { return 0; }
static int mq_crc_fold_ok = 0;
#endif

/* zlib's crc32(crc, buf, len) for any len; call mq_crc_fold_init() once first. */
static inline uint32_t mq_crc32(uint32_t crc, const unsigned char *buf, size_t len) {
    if (!len) return crc; /* zlib returns 0 for a NULL buffer */
#ifdef MQ_CRC_FOLD
    if (mq_crc_fold_ok > 0 && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        crc = ~mq_crc32_fold64(buf, chunk, ~crc);
        buf += chunk;
        len -= chunk;
        if (!len) return crc;
    }
#endif
    while (len > 0x40000000) { /* zlib takes an unsigned int length */
        crc = (uint32_t)crc32(crc, buf, 0x40000000);
        buf += 0x40000000;
        len -= 0x40000000;
    }
    return (uint32_t)crc32(crc, buf, (unsigned int)len);
}

#endif
