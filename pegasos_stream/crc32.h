/* CRC-32 as zlib.crc32 computes it (reflected polynomial 0xEDB88320): the hash of feature_hash, shared by
 * the compiled modules. Each module calls crc_init() once, when it loads.
 *
 * The update is affine over GF(2) (CRC[a ^ b] = CRC[a] ^ CRC[b]), so n bytes go through at once by
 * "slicing": CRC_AFTER[i][b] is CRC[b] carried through i zero bytes after it, and the update over n <= 8
 * bytes XORs one lookup a byte (the state's bytes folded into the first four), lookups that wait on
 * nothing but their bytes, where a byte at a time chains n dependent lookups. */
#ifndef PEGASOS_STREAM_CRC32_H
#define PEGASOS_STREAM_CRC32_H

#include <Python.h>
#include <stdint.h>

static uint32_t CRC_AFTER[8][256];
#define CRC CRC_AFTER[0]
static uint32_t CRC_START_ZEROS[9];  /* [n]: the state from 0xFFFFFFFF after n zero bytes */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        CRC[i] = c;
    }
    for (int i = 1; i < 8; i++)
        for (int b = 0; b < 256; b++) CRC_AFTER[i][b] = CRC[CRC_AFTER[i - 1][b] & 0xFF] ^ (CRC_AFTER[i - 1][b] >> 8);
    CRC_START_ZEROS[0] = 0xFFFFFFFFu;
    for (int n = 1; n <= 8; n++) CRC_START_ZEROS[n] = CRC[CRC_START_ZEROS[n - 1] & 0xFF] ^ (CRC_START_ZEROS[n - 1] >> 8);
}

/* The CRC state c after the bytes s[0:n], 0 <= n <= 8: byte j of s, with byte j of c folded into the first
 * four, carried through the n - 1 - j bytes after it. */
static inline uint32_t crc_slice(uint32_t c, const unsigned char *s, Py_ssize_t n) {
    uint32_t after = n < 4 ? (uint32_t)((uint64_t)c >> (8 * n)) : 0;  /* the state's bytes past the input */
    for (Py_ssize_t j = 0; j < n; j++) after ^= CRC_AFTER[n - 1 - j][s[j] ^ (j < 4 ? (c >> (8 * j)) & 0xFF : 0)];
    return after;
}

/* crc_update(start, s, n) for 1 <= n <= 8, given ``after``, the state from ``start`` after n zero bytes: the cases
 * fall through, a lookup a byte, no loop (for a start used again and again, as the n-grams of a text use theirs). */
static inline uint32_t crc_after_zeros(uint32_t after, const unsigned char *s, int n) {
    const uint32_t(*last)[256] = &CRC_AFTER[n - 1];  /* byte i is carried through the n - 1 - i after it */
    switch (n) {
    case 8: after ^= last[-7][s[7]]; /* fall through */
    case 7: after ^= last[-6][s[6]]; /* fall through */
    case 6: after ^= last[-5][s[5]]; /* fall through */
    case 5: after ^= last[-4][s[4]]; /* fall through */
    case 4: after ^= last[-3][s[3]]; /* fall through */
    case 3: after ^= last[-2][s[2]]; /* fall through */
    case 2: after ^= last[-1][s[1]]; /* fall through */
    case 1: after ^= last[0][s[0]];
    }
    return after;
}

/* The CRC state c after the bytes s[0:n] (zlib.crc32 of them is ~crc_update(0xFFFFFFFF, s, n)). */
static inline uint32_t crc_update(uint32_t c, const unsigned char *s, Py_ssize_t n) {
    for (; n > 8; s += 8, n -= 8) c = crc_slice(c, s, 8);
    return crc_slice(c, s, n);
}

/* zlib.crc32 of n <= 8 bytes given as ``word``, the first in its lowest byte and zeros past the n-th, with
 * no branch on n: by the same affinity, the state after n zero bytes XOR the bytes' update from state 0,
 * which zero bytes put before them do not change (state 0 stays 0). */
static inline uint32_t crc_of_word(uint64_t word, int n) {
    uint64_t w = n ? word << (64 - 8 * n) : 0;
    return ~(CRC_START_ZEROS[n] ^ CRC_AFTER[7][w & 0xFF] ^ CRC_AFTER[6][(w >> 8) & 0xFF] ^ CRC_AFTER[5][(w >> 16) & 0xFF]
             ^ CRC_AFTER[4][(w >> 24) & 0xFF] ^ CRC_AFTER[3][(w >> 32) & 0xFF] ^ CRC_AFTER[2][(w >> 40) & 0xFF]
             ^ CRC_AFTER[1][(w >> 48) & 0xFF] ^ CRC_AFTER[0][w >> 56]);
}

#endif
