/* Big-endian fields of RocketMQ's records (Java's ByteBuffer order), read from any
   alignment: the kernels' one copy of these helpers. */
#ifndef MQSTORE_BIG_ENDIAN_H
#define MQSTORE_BIG_ENDIAN_H
#include <stdint.h>
#include <string.h>

static inline int16_t mq_be16(const unsigned char *p) {
    uint16_t v; memcpy(&v, p, 2); return (int16_t)__builtin_bswap16(v);
}
static inline int32_t mq_be32(const unsigned char *p) {
    uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v);
}
static inline int64_t mq_be64(const unsigned char *p) {
    uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v);
}
#endif
