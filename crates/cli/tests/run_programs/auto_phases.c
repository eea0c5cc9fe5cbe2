/* `--budget auto` through a phase change. Fills MIB MiB, then for QUIET seconds touches
 * only an 8 MiB hot set (the rest goes cold: the budget comes down), then touches
 * everything again for BUSY seconds. It reads the tree's budget from the broker's tree
 * file ($USWAP_RUN_DIR/tree) and prints the budget at the end of the quiet phase, how
 * long after the busy phase began the budget first reached twice that, and how many bytes
 * read back wrong (every byte of every page is checked, twice). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long long budget(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    unsigned long long value = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "budget_bytes %llu", &value) == 1) break;
    fclose(f);
    return value;
}

static unsigned char pat(size_t i, unsigned v) { return (unsigned char)(i * 7 + (i >> 12) * 13 + v); }

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 128;
    double quiet = argc > 2 ? atof(argv[2]) : 6, busy = argc > 3 ? atof(argv[3]) : 4;
    const char *dir = getenv("USWAP_RUN_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tree", dir ? dir : "/nonexistent");
    size_t n = mib << 20, hot = 8u << 20;
    unsigned char *p = malloc(n);
    if (!p) return 2;
    for (size_t i = 0; i < n; i++) p[i] = pat(i, 1);
    long bad = 0;
    double t = now();
    while (now() - t < quiet) {
        for (size_t i = 0; i < hot; i += 4096) bad += p[i] != pat(i, 1);
        usleep(2000);
    }
    unsigned long long low = budget(path);
    double t0 = now(), up_ms = -1;
    unsigned v = 1;
    while (now() - t0 < busy) {
        for (size_t i = 0; i < n; i++) {
            bad += p[i] != pat(i, v);
            p[i] = pat(i, v + 1);
            if ((i & ((8u << 20) - 1)) == 0 && up_ms < 0 && low && budget(path) >= 2 * low)
                up_ms = (now() - t0) * 1000;
        }
        v++;
    }
    for (size_t i = 0; i < n; i++) bad += p[i] != pat(i, v);
    printf("quiet budget %llu MiB; doubled after %.0f ms; bad %ld\n", low >> 20, up_ms, bad);
    return bad != 0;
}
