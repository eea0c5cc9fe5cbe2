/* What a program's own mmap costs under `uswap run`, which adopts a new private read-write
 * anonymous range before mmap returns (crates/preload/src/interpose.rs): COUNT mappings of
 * SIZE KiB, each mapped, then written page by page (timed apart), then unmapped. Prints
 * the microseconds per mmap call and per mapping's writes, and how many pages the program
 * touched before their range was managed is in `uswap stat`'s shim_pages_adopted.
 *   gcc -O2 -o /tmp/mmap_cost bench/probes/mmap_cost.c
 *   uswap run --budget 64M -- /tmp/mmap_cost 2000 256 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 2000;
    size_t size = (argc > 2 ? (size_t)atoi(argv[2]) : 256) << 10;
    double mapping = 0, writing = 0;
    for (int i = 0; i < count; i++) {
        double t0 = now();
        unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        double t1 = now();
        if (p == MAP_FAILED) { perror("mmap"); return 1; }
        for (size_t o = 0; o < size; o += 4096) p[o] = (unsigned char)(i + o / 4096 + 1);
        for (size_t o = 0; o < size; o += 4096)
            if (p[o] != (unsigned char)(i + o / 4096 + 1)) { fprintf(stderr, "bad byte\n"); return 1; }
        double t2 = now();
        munmap(p, size);
        mapping += t1 - t0;
        writing += t2 - t1;
    }
    printf("%d mappings of %zu KiB: mmap %.1f us each, writing one %.1f us\n", count, size >> 10,
           mapping / count * 1e6, writing / count * 1e6);
    return 0;
}
