/* Many threads at once: `threads_many N ROUNDS`. N threads (default 200) each malloc 1 MiB
 * (an mmap'd block of glibc's own), and ROUNDS times (default 3) fill it, wait for the
 * others, check every word, wait again. Prints "threads N bad B"; exits 0 when B is 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <unistd.h>
#define MB (1u << 20)
static int rounds = 3; /* argv[2] */
static pthread_barrier_t bar;
static long bad_total;
static void *worker(void *arg) {
    long t = (long)arg, bad = 0;
    uint64_t *p = malloc(MB);
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < MB / 8; i++) p[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ t ^ (uint64_t)r << 40;
        pthread_barrier_wait(&bar);
        for (size_t i = 0; i < MB / 8; i++) bad += p[i] != ((i + 1) * 0x9E3779B97F4A7C15ull ^ t ^ (uint64_t)r << 40);
        pthread_barrier_wait(&bar);
    }
    free(p);
    __atomic_add_fetch(&bad_total, bad, __ATOMIC_SEQ_CST);
    return NULL;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    if (argc > 2) rounds = atoi(argv[2]);
    if (n < 1 || n > 1024 || rounds < 1) return 2;
    pthread_t th[1024];
    pthread_barrier_init(&bar, NULL, n);
    for (long t = 0; t < n; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < n; t++) pthread_join(th[t], NULL);
    printf("threads %d bad %ld\n", n, bad_total);
    return bad_total != 0;
}
