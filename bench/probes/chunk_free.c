/* What giving a 2 MiB huge-page chunk back costs: free() (glibc munmaps it) against
 * MADV_DONTNEED of the same range, and what touching a released chunk again costs.
 * 64 chunks, 5 rounds. Build and run: gcc -O2 -o /tmp/chunk_free bench/probes/chunk_free.c
 * && /tmp/chunk_free (docs/benchmarks.md; zpool's arena essay). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CHUNK (2 << 20)
#define CHUNKS 64
#define ROUNDS 5

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *fresh_chunk(void) {
    void *p = aligned_alloc(CHUNK, CHUNK);
    if (!p) exit(1);
    madvise(p, CHUNK, MADV_HUGEPAGE);
    memset(p, 0, CHUNK);
    return p;
}

int main(void) {
    double freed = 0, released = 0, refault = 0;
    for (int r = 0; r < ROUNDS; r++) {
        void *p[CHUNKS];
        for (int i = 0; i < CHUNKS; i++) p[i] = fresh_chunk();
        double t = now_ns();
        for (int i = 0; i < CHUNKS; i++) free(p[i]);
        freed += now_ns() - t;
        for (int i = 0; i < CHUNKS; i++) p[i] = fresh_chunk();
        t = now_ns();
        for (int i = 0; i < CHUNKS; i++) madvise(p[i], CHUNK, MADV_DONTNEED);
        released += now_ns() - t;
        t = now_ns();
        for (int i = 0; i < CHUNKS; i++) memset(p[i], 0, CHUNK);
        refault += now_ns() - t;
        for (int i = 0; i < CHUNKS; i++) free(p[i]);
    }
    double n = CHUNKS * ROUNDS * 1e3;
    printf("us per 2 MiB chunk: free (munmap) %.1f, MADV_DONTNEED %.1f, touch again %.1f\n",
           freed / n, released / n, refault / n);
    return 0;
}
