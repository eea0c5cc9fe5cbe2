/* The program frees memory and reuses the addresses: MADV_DONTNEED (reads zero after),
 * munmap + mmap(MAP_FIXED) at the same address (zero, then new data), mremap grow and
 * move (data follows), malloc/free churn with malloc_trim, read(2) into evicted pages. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <malloc.h>
#include <sys/mman.h>
#define MB (1u << 20)
#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); return 1; } while (0)
static void fill(unsigned char *p, size_t n, unsigned seed) { for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * seed + (i >> 12)); }
static long bad(const unsigned char *p, size_t n, unsigned seed) { for (size_t i = 0; i < n; i++) if (p[i] != (unsigned char)(i * seed + (i >> 12))) return (long)i; return -1; }
static int zero(const unsigned char *p, size_t n) { for (size_t i = 0; i < n; i++) if (p[i]) return 0; return 1; }
int main(void) {
    size_t n = 32 * MB;
    unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) FAIL("mmap\n");
    usleep(30000); /* let the shim's scan register it */
    fill(p, n, 3);
    if (bad(p, n, 3) >= 0) FAIL("first fill\n");
    madvise(p, n / 2, MADV_DONTNEED);
    if (!zero(p, n / 2) || bad(p + n / 2, n / 2, 3) >= 0 && 0) FAIL("dontneed\n");
    for (size_t i = n / 2; i < n; i++) if (p[i] != (unsigned char)(i * 3 + (i >> 12))) FAIL("kept half at %zu\n", i);
    fill(p, n / 2, 5);
    munmap(p + n / 4, n / 4);
    unsigned char *q = mmap(p + n / 4, n / 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (q != p + n / 4 || !zero(q, n / 4)) FAIL("map fixed\n");
    fill(q, n / 4, 7);
    usleep(30000);
    if (bad(p, n / 4, 5) >= 0 || bad(q, n / 4, 7) >= 0) FAIL("after remap fixed\n");
    unsigned char *r = mremap(p + n / 2, n / 2, n, MREMAP_MAYMOVE);
    if (r == MAP_FAILED) FAIL("mremap\n");
    for (size_t i = 0; i < n / 2; i++) if (r[i] != (unsigned char)((i + n / 2) * 3 + ((i + n / 2) >> 12))) FAIL("mremap data at %zu\n", i);
    if (!zero(r + n / 2, n / 2)) FAIL("grown part\n");
    fill(r, n, 9);
    int fds[2];
    if (pipe(fds)) FAIL("pipe\n");
    for (size_t off = 0; off < 16 * 4096; off += 4096) {
        unsigned char page[4096];
        memset(page, (int)(off >> 12) + 1, 4096);
        if (write(fds[1], page, 4096) != 4096 || read(fds[0], r + off, 4096) != 4096) FAIL("read(2)\n");
        if (r[off] != (unsigned char)((off >> 12) + 1)) FAIL("read(2) data\n");
    }
    for (int round = 0; round < 20; round++) {
        void *blocks[64];
        for (int i = 0; i < 64; i++) { blocks[i] = malloc(256 * 1024); memset(blocks[i], round + i, 256 * 1024); }
        for (int i = 0; i < 64; i++) { unsigned char *b = blocks[i]; if (b[1000] != (unsigned char)(round + i)) FAIL("churn\n"); free(b); }
        malloc_trim(0);
    }
    if (bad(p, n / 4, 5) >= 0 || bad(q, n / 4, 7) >= 0) FAIL("final check low\n");
    printf("ok\n");
    return 0;
}
