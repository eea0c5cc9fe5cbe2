/* One thread writes 32 MiB (most of it paged out under a small budget), then reads pages
 * scattered over it for about two seconds: every read a fault served by uswap's handler.
 * Every 20 ms it looks where uswap's threads may run: the handler (uswap-uffd) on this
 * thread's CPU alone, and the reclaimer (uswap-kswapd) not on it. Prints
 * "placed K of N" (K: looks that found that placement) and exits 0 when every page read
 * back holds what was written. */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#define N (32u << 20)
#define PG 4096u

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* The Cpus_allowed_list of this process's thread named `comm`, into `out` (32 bytes); 0 if
 * none. */
static int allowed_of(const char *comm, char *out) {
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    int found = 0;
    while (dir && !found && (e = readdir(dir))) {
        char path[300], name[32] = {0}, line[256];
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(name, sizeof name, f)) name[0] = 0;
        fclose(f);
        name[strcspn(name, "\n")] = 0;
        if (strcmp(name, comm) != 0) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "Cpus_allowed_list: %31s", out) == 1) found = 1;
        if (f) fclose(f);
    }
    if (dir) closedir(dir);
    return found;
}

/* Whether the list "a,b-c" holds `cpu`. */
static int list_has(const char *list, int cpu) {
    const char *s = list;
    while (*s) {
        int lo = atoi(s), hi = lo;
        while (*s >= '0' && *s <= '9') s++;
        if (*s == '-') hi = atoi(++s);
        while (*s >= '0' && *s <= '9') s++;
        if (cpu >= lo && cpu <= hi) return 1;
        if (*s == ',') s++;
    }
    return 0;
}

int main(void) {
    unsigned char *p = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    for (size_t pg = 0; pg < N / PG; pg++) memset(p + pg * PG, (int)(pg % 251 + 1), PG);
    unsigned seed = 1;
    int placed = 0, looks = 0;
    double start = now_s(), next = start;
    unsigned long sum = 0;
    while (now_s() - start < 2.0) {
        for (int i = 0; i < 64; i++) {
            seed = seed * 1103515245u + 12345u;
            sum += p[(size_t)(seed >> 8) % (N / PG) * PG];
        }
        if (now_s() < next) continue;
        next += 0.02;
        char handler[32] = {0}, reclaimer[32] = {0}, mine[16];
        int cpu = sched_getcpu();
        if (!allowed_of("uswap-uffd", handler) ||
            !allowed_of("uswap-kswapd", reclaimer))
            continue;
        looks++;
        snprintf(mine, sizeof mine, "%d", cpu);
        if (strcmp(handler, mine) == 0 && !list_has(reclaimer, cpu)) placed++;
    }
    for (size_t pg = 0; pg < N / PG; pg++)
        for (size_t i = 0; i < PG; i++)
            if (p[pg * PG + i] != (unsigned char)(pg % 251 + 1)) {
                fprintf(stderr, "page %zu byte %zu is %u\n", pg, i, p[pg * PG + i]);
                return 1;
            }
    printf("placed %d of %d (sum %lu)\n", placed, looks, sum);
    return 0;
}
