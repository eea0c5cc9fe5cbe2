/* The cost of a cold 64 KiB folio's copy, by how it is made: 2048 folios (128 MiB) each
 * way, buffers advised MADV_HUGEPAGE (as the pool's arena and the engine bench's simulated
 * memory are) and flushed from the caches by a pass over a third buffer before each mode;
 * each folio copied (1) as 16 glibc memcpy calls of 4 KiB from consecutive source pages,
 * (2) as one memcpy of 64 KiB, (3) as 16 memcpy calls of 4 KiB from scattered source pages;
 * 64 scattered read-modify-writes between two folios stand for a fault's bookkeeping.
 * Prints the p50 per page of each mode, three rounds.
 * Build and run: gcc -O2 -o /tmp/folio_copy bench/probes/folio_copy.c && /tmp/folio_copy
 * (docs/benchmarks.md, "Probes"). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define BYTES (128UL << 20)
#define HUGE (2UL << 20)
#define PAGE 4096
#define FOLIO (16 * PAGE)

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* BYTES of memory at a 2 MiB boundary, advised for huge pages, then written. */
static char *huge_buffer(void) {
    char *map = mmap(NULL, BYTES + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *buf = (char *)(((uintptr_t)map + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    madvise(buf, BYTES, MADV_HUGEPAGE);
    memset(buf, 1, BYTES);
    return buf;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    char *src = huge_buffer(), *dst = huge_buffer(), *junk = huge_buffer();
    const size_t folios = BYTES / FOLIO, pages = BYTES / PAGE;
    uint64_t *times = malloc(folios * sizeof *times);
    const char *names[] = {"16 x 4 KiB, consecutive", "1 x 64 KiB", "16 x 4 KiB, scattered"};
    for (int round = 0; round < 3; round++) {
        for (int mode = 0; mode < 3; mode++) {
            for (size_t i = 0; i < BYTES; i += 64)
                junk[i]++;
            for (size_t f = 0; f < folios; f++) {
                char *to = dst + f * FOLIO, *from = src + f * FOLIO;
                uint64_t start = now_ns();
                if (mode == 0)
                    for (int i = 0; i < 16; i++)
                        memcpy(to + i * PAGE, from + i * PAGE, PAGE);
                else if (mode == 1)
                    memcpy(to, from, FOLIO);
                else
                    for (int i = 0; i < 16; i++)
                        memcpy(to + i * PAGE, src + ((f * 16 + i) * 7919 % pages) * PAGE, PAGE);
                times[f] = now_ns() - start;
                for (size_t k = 0; k < 64; k++)
                    junk[((f * 64 + k) * 4099 * 64) % BYTES]++;
            }
            qsort(times, folios, sizeof *times, by_value);
            printf("round %d  %-26s p50 %6.1f ns a page\n", round, names[mode],
                   (double)times[folios / 2] / 16.0);
        }
    }
    return 0;
}
