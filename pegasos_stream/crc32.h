/* CRC-32 as zlib.crc32 computes it (reflected polynomial 0xEDB88320), a byte at a time: the hash of
 * feature_hash, shared by the compiled modules. Each module calls crc_init() once, when it loads. */
#ifndef PEGASOS_STREAM_CRC32_H
#define PEGASOS_STREAM_CRC32_H

#include <Python.h>
#include <stdint.h>

static uint32_t CRC[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        CRC[i] = c;
    }
}

/* The CRC state c after the bytes s[0:n] (zlib.crc32 of them is ~crc_update(0xFFFFFFFF, s, n)). */
static inline uint32_t crc_update(uint32_t c, const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) c = CRC[(c ^ s[i]) & 0xFF] ^ (c >> 8);
    return c;
}

#endif
