/* What MADV_DONTNEED on part of a huge page gives back: 64 chunks of 2 MiB on huge pages,
 * touched, then 511 of each chunk's 512 pages released, then the last page. Prints the
 * process's RssAnon and, when run as root with cgroup v1's memory controller at
 * /sys/fs/cgroup/memory, the charge of a memory cgroup it moves itself into (what the
 * kernel really holds). Build and run: gcc -O2 -o /tmp/thp_partial
 * bench/probes/thp_partial.c && /tmp/thp_partial (docs/benchmarks.md; zpool's arena
 * essay: why a huge chunk is released whole or not at all). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (2 << 20)
#define CHUNKS 64
#define GROUP "/sys/fs/cgroup/memory/uswap-thp-probe"

static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static long rss_anon_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8))
            sscanf(line + 8, "%ld", &v);
    if (f)
        fclose(f);
    return v;
}

static int join_group(void) {
    if (mkdir(GROUP, 0755) && access(GROUP, F_OK))
        return 0;
    FILE *f = fopen(GROUP "/cgroup.procs", "w");
    if (!f)
        return 0;
    fprintf(f, "%d\n", getpid());
    return fclose(f) == 0;
}

static void report(const char *what, int grouped, long base) {
    long charged = grouped ? read_long(GROUP "/memory.usage_in_bytes") - base : -1;
    printf("%-44s RssAnon %7ld KiB  cgroup charge %s", what, rss_anon_kib(),
           grouped ? "" : "(no cgroup)\n");
    if (grouped)
        printf("%7ld KiB\n", charged / 1024);
}

int main(void) {
    int grouped = join_group();
    long base = grouped ? read_long(GROUP "/memory.usage_in_bytes") : 0;
    char *chunks = aligned_alloc(CHUNK, (size_t)CHUNKS * CHUNK);
    if (!chunks)
        return 1;
    madvise(chunks, (size_t)CHUNKS * CHUNK, MADV_HUGEPAGE);
    memset(chunks, 1, (size_t)CHUNKS * CHUNK);
    report("touched", grouped, base);
    for (int c = 0; c < CHUNKS; c++)
        madvise(chunks + (size_t)c * CHUNK + 4096, CHUNK - 4096, MADV_DONTNEED);
    report("511 of 512 pages of each chunk released", grouped, base);
    for (int c = 0; c < CHUNKS; c++)
        madvise(chunks + (size_t)c * CHUNK, 4096, MADV_DONTNEED);
    report("the last page released too", grouped, base);
    if (grouped) {
        FILE *f = fopen("/sys/fs/cgroup/memory/cgroup.procs", "w");
        if (f) {
            fprintf(f, "%d\n", getpid());
            fclose(f);
        }
        rmdir(GROUP);
    }
    return 0;
}
