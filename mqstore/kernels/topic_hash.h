/* A 64-bit mix of a topic's bytes, 8 at a time, for the kernels' open-addressing
   tables of topics (_scan's per-chunk codes, _intern's process-wide ids). A hash:
   equal topics are still compared. The kernels' one copy. */
#ifndef MQSTORE_TOPIC_HASH_H
#define MQSTORE_TOPIC_HASH_H
#include <stdint.h>
#include <string.h>

static inline uint64_t mq_topic_hash(const unsigned char *p, int64_t n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL, w = 0;
    int64_t i = 0;
    while (i + 8 <= n) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xC2B2AE3D27D4EB4FULL;
        h ^= h >> 29;
        i += 8;
    }
    if (i < n) {
        w = 0;
        memcpy(&w, p + i, (size_t)(n - i));
        h = (h ^ w) * 0xC2B2AE3D27D4EB4FULL;
        h ^= h >> 29;
    }
    return h ^ (h >> 32);
}

#endif
