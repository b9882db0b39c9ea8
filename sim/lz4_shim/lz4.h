/* A header-only stand-in for the two LZ4 calls Verilator's FST writer makes, so that FST traces
 * build without liblz4-dev. It writes valid LZ4 blocks made of literals only (no compression):
 * any LZ4 decoder (gtkwave, fst readers) reads them; the files are just larger. */
#ifndef VTA_LZ4_SHIM_H
#define VTA_LZ4_SHIM_H

static inline int LZ4_compressBound(int isize) {
    return (isize < 0 || isize > 0x7E000000) ? 0 : isize + isize / 255 + 16;
}

static inline int LZ4_compress_default(const char* src, char* dst, int srcSize, int dstCapacity) {
    if (srcSize < 0 || dstCapacity < LZ4_compressBound(srcSize)) return 0;
    int n = 0;
    int len = srcSize;
    dst[n++] = (char)((len >= 15 ? 15 : len) << 4);  /* one sequence: literals only, no match */
    if (len >= 15) {
        int rest = len - 15;
        while (rest >= 255) { dst[n++] = (char)255; rest -= 255; }
        dst[n++] = (char)rest;
    }
    for (int i = 0; i < len; i++) dst[n++] = src[i];
    return n;
}

#endif
