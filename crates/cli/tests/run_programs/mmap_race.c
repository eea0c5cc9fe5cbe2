/* Four threads map, fill, check and unmap anonymous ranges of 64-512 KiB side by side, so
 * that one thread's new range often lies where another's was unmapped a moment before
 * (crates/frontend/src/fence.rs); some are mapped with MAP_FIXED over the thread's own older
 * one (an UNMAP, then a new range at the same address); eight stay mapped per thread, so
 * that the small budget pages them out. Each mapping is adopted before mmap returns
 * (crates/preload/src/interpose.rs): the threads wait for the handler's scans side by
 * side. With an argument N, the main thread meanwhile forks N children that check a range
 * mapped before each fork. With a second argument "raw", every mapping is made with the
 * system call itself, as malloc's own large blocks are (no interposer sees them: the
 * handler's periodic scan adopts them, while the program already writes them), and each
 * round sleeps 500 us so that most ranges are adopted while they live. Every byte is
 * checked. Exit 0 when all agree. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#define THREADS 4
#define ROUNDS 300
#define KEEP 8
#define PG 4096u
struct range { unsigned char *p; size_t len; unsigned tag; };
static int raw;
static void *map(void *at, size_t len, int flags) {
    flags |= MAP_PRIVATE | MAP_ANONYMOUS;
    if (raw) return (void *)syscall(SYS_mmap, at, len, PROT_READ | PROT_WRITE, flags, -1, 0);
    return mmap(at, len, PROT_READ | PROT_WRITE, flags, -1, 0);
}
static unsigned char val(unsigned tag, size_t pg) { return (unsigned char)((tag * 31 + pg * 7) % 251 + 1); }
static void fill(struct range *r) {
    for (size_t pg = 0; pg < r->len / PG; pg++) memset(r->p + pg * PG, val(r->tag, pg), PG);
}
static int check(const struct range *r) {
    for (size_t pg = 0; pg < r->len / PG; pg++)
        for (size_t i = 0; i < PG; i += 512)
            if (r->p[pg * PG + i] != val(r->tag, pg)) return 1;
    return 0;
}
static void *worker(void *arg) {
    unsigned id = (unsigned)(size_t)arg;
    struct range kept[KEEP] = {{0}};
    long bad = 0;
    for (unsigned round = 0; round < ROUNDS; round++) {
        struct range *slot = &kept[round % KEEP];
        if (slot->p && check(slot)) bad++;
        size_t len = (size_t)(16 + (round * 37 + id * 11) % 113) * PG;
        unsigned tag = id * 100000 + round;
        unsigned char *p;
        if (slot->p && round % 5 == 0 && slot->len >= len) {
            /* Over the thread's own older range, at the same address. */
            p = map(slot->p, len, MAP_FIXED);
            if (slot->len > len) munmap(slot->p + len, slot->len - len);
        } else {
            if (slot->p) munmap(slot->p, slot->len);
            p = map(NULL, len, 0);
        }
        if (p == MAP_FAILED) { perror("mmap"); return (void *)1; }
        *slot = (struct range){p, len, tag};
        for (size_t pg = 0; pg < len / PG; pg++)
            if (p[pg * PG + 100] != 0) bad++; /* a new mapping reads zeros */
        fill(slot);
        if (check(slot)) bad++;
        if (raw) usleep(500);
    }
    for (int k = 0; k < KEEP; k++)
        if (kept[k].p && check(&kept[k])) bad++;
    if (bad) fprintf(stderr, "thread %u: %ld bad ranges\n", id, bad);
    return (void *)(size_t)(bad != 0);
}
int main(int argc, char **argv) {
    unsigned forks = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
    raw = argc > 2 && strcmp(argv[2], "raw") == 0;
    pthread_t t[THREADS];
    for (size_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    int children_bad = 0;
    for (unsigned k = 0; k < forks; k++) {
        struct range r = {map(NULL, 64 * PG, 0), 64 * PG, 900000 + k};
        if (r.p == MAP_FAILED) return 2;
        fill(&r);
        pid_t pid = fork();
        if (pid == 0) _exit(check(&r));
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) children_bad++;
        if (check(&r)) children_bad++;
        munmap(r.p, r.len);
        usleep(raw ? 100000 : 2000);
    }
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        bad += ret != NULL;
    }
    printf("mmap race: threads bad %d, children bad %d\n", bad, children_bad);
    return bad || children_bad;
}
