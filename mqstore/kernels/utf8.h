/* Well-formed UTF-8, as Arrow's validation and Python's strict decode accept it:
   no overlong forms, no surrogates, nothing past U+10FFFF. The kernels' one copy. */
#ifndef MQSTORE_UTF8_H
#define MQSTORE_UTF8_H
#include <stdint.h>
#include <string.h>

static inline int mq_utf8_ok(const unsigned char *p, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {  /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) { i += 8; continue; }
        }
        unsigned char c = p[i];
        int need;
        if (c < 0x80) { i += 1; continue; }
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) need = 2;
        else if (c >= 0xF0 && c <= 0xF4) need = 3;
        else return 0;
        if (i + need >= n) return 0;  /* its continuation bytes are i+1 .. i+need */
        unsigned char d = p[i + 1];  /* the second byte's range depends on the first */
        if (c == 0xE0 && !(d >= 0xA0 && d <= 0xBF)) return 0;
        if (c == 0xED && !(d >= 0x80 && d <= 0x9F)) return 0;
        if (c == 0xF0 && !(d >= 0x90 && d <= 0xBF)) return 0;
        if (c == 0xF4 && !(d >= 0x80 && d <= 0x8F)) return 0;
        for (int k = 1; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}
#endif
