/* Threads that sleep while the main thread fills memory four times a small budget, then
 * wake and check their stacks. Under `uswap run --delivery sigbus` this used to kill the
 * process: a waking thread's stack page (with its signal frame's room and glibc's rseq
 * area at the top) was swapped out, and the kernel cannot take that fault on the way back
 * to user mode (SIGSEGV), or a new thread touched it while glibc blocked every signal
 * (SIGBUS). Then threads made with every signal blocked read swapped memory. Prints a line
 * and exits 0 when every thread's stack is intact and the main thread's data reads back. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define T 4
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int go, done;
static unsigned char *shared;
static size_t shared_n;
/* Threads made with every signal blocked (as jemalloc makes its background threads) read
 * the main thread's swapped memory: a fault's SIGBUS must not be blocked in them. */
static void *reader(void *arg) {
    (void)arg;
    unsigned sum = 0;
    for (size_t i = 0; i < shared_n; i += 4096) sum += shared[i];
    __sync_fetch_and_add(&done, 1);
    return (void *)(size_t)(sum | 1);
}
static void *worker(void *arg) {
    volatile char buf[64 * 1024];
    memset((char *)buf, (int)(long)arg, sizeof buf);
    pthread_mutex_lock(&m);
    while (!go) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != (char)(long)arg) { fprintf(stderr, "a thread's stack changed\n"); exit(3); }
    __sync_fetch_and_add(&done, 1);
    return NULL;
}
int main(void) {
    pthread_t t[T];
    for (long i = 0; i < T; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    usleep(100000);
    size_t n = 32u << 20;
    unsigned char *p = malloc(n);
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + round);
    pthread_mutex_lock(&m); go = 1; pthread_cond_broadcast(&c); pthread_mutex_unlock(&m);
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + 2)) { fprintf(stderr, "byte %zu\n", i); return 4; }
    /* threads made and ended again while memory is swapped: stacks reused from glibc's cache */
    for (int round = 0; round < 3; round++) {
        go = 1;
        for (long i = 0; i < T; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
        for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
        for (size_t i = 0; i < n; i += 4096) p[i]++;
    }
    shared = p; shared_n = n;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (long i = 0; i < T; i++) pthread_create(&t[i], NULL, reader, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    printf("idle_threads: %d threads woke with their stacks intact or read swapped memory with every signal blocked, 32 MiB checked\n", done);
    return 0;
}
