/* The cost of a cold 4 KiB copy, by where source and destination lie: 32768 pages
 * (128 MiB) each way, copied in address order, then page by page in a shuffled order,
 * with glibc's memcpy, with non-temporal stores, and with `rep movsb`. Then in address
 * order with 8 scattered read-modify-writes of a 64 MiB buffer between two copies (an
 * order-0 fault's bookkeeping between its copy and the next; back to back is an order-4
 * folio's 16), with memcpy and with non-temporal stores, and those touches alone.
 * With the argument `huge`, source and destination are advised MADV_HUGEPAGE first, as the
 * pool's arena and the engine bench's simulated memory are.
 * Build and run: gcc -O2 -mavx2 -o /tmp/copy bench/probes/copy.c && /tmp/copy [huge]
 * (docs/benchmarks.md, "Probes"). */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGES 32768
#define PAGE 4096
#define JUNK (64 << 20)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void copy_nt(char *dst, const char *src) {
    for (int i = 0; i < PAGE; i += 64) {
        __m256i a = _mm256_loadu_si256((const void *)(src + i));
        __m256i b = _mm256_loadu_si256((const void *)(src + i + 32));
        _mm256_stream_si256((void *)(dst + i), a);
        _mm256_stream_si256((void *)(dst + i + 32), b);
    }
}

static void copy_rep(char *dst, const char *src) {
    size_t n = PAGE;
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n)::"memory");
}

int main(int argc, char **argv) {
    size_t align = argc > 1 && strcmp(argv[1], "huge") == 0 ? 2 << 20 : PAGE;
    char *src = aligned_alloc(align, (size_t)PAGES * PAGE);
    char *dst = aligned_alloc(align, (size_t)PAGES * PAGE);
    unsigned *perm = malloc(PAGES * sizeof *perm);
    char *junk = malloc(JUNK);
    if (!src || !dst || !perm || !junk) return 1;
    memset(junk, 0, JUNK);
    if (align != PAGE) {
        madvise(src, (size_t)PAGES * PAGE, MADV_HUGEPAGE);
        madvise(dst, (size_t)PAGES * PAGE, MADV_HUGEPAGE);
    }
    memset(src, 7, (size_t)PAGES * PAGE);
    memset(dst, 1, (size_t)PAGES * PAGE);
    for (int i = 0; i < PAGES; i++) perm[i] = i;
    srand(1);
    for (int i = PAGES - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        unsigned t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
#define SRC(i) (src + (size_t)(i) * PAGE)
#define DST(i) (dst + (size_t)(i) * PAGE)
    for (int round = 0; round < 3; round++) {
        double t = now_ns();
        for (int i = 0; i < PAGES; i++) memcpy(DST(i), SRC(i), PAGE);
        double seq = now_ns() - t;
        t = now_ns();
        for (int i = 0; i < PAGES; i++) memcpy(DST(perm[i]), SRC(perm[(i * 7) % PAGES]), PAGE);
        double scattered = now_ns() - t;
        t = now_ns();
        for (int i = 0; i < PAGES; i++) copy_nt(DST(i), SRC(i));
        _mm_sfence();
        double nt = now_ns() - t;
        t = now_ns();
        for (int i = 0; i < PAGES; i++) copy_rep(DST(i), SRC(i));
        double rep = now_ns() - t;
        printf("ns per 4 KiB page: memcpy in order %.0f, memcpy scattered %.0f, "
               "non-temporal in order %.0f, rep movsb in order %.0f\n",
               seq / PAGES, scattered / PAGES, nt / PAGES, rep / PAGES);
        double between[3];
        for (int kind = 0; kind < 3; kind++) {
            t = now_ns();
            for (int i = 0; i < PAGES; i++) {
                if (kind == 0) memcpy(DST(i), SRC(i), PAGE);
                if (kind == 1) copy_nt(DST(i), SRC(i));
                for (int j = 0; j < 8; j++) junk[((size_t)i * 7919 + (size_t)j * 8384) % JUNK]++;
            }
            _mm_sfence();
            between[kind] = now_ns() - t;
        }
        printf("  with 8 scattered touches between copies: memcpy %.0f, non-temporal %.0f, "
               "the touches alone %.0f\n",
               between[0] / PAGES, between[1] / PAGES, between[2] / PAGES);
    }
    return 0;
}
