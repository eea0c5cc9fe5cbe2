/* A malloc interposer for the tests of `uswap run` (LD_PRELOAD, after the shim): counts the
 * malloc-family calls made on the engine's threads (named "uswap-*") once the shim says it
 * manages the program's memory (its exported uswap_shim_managing), and says at exit, on
 * stderr:
 *     uswap-malloc-check: engine-thread calls N, checked calls M, first size S
 * M counts every call checked (any thread, while managed): M > 0 shows the interposer was
 * live. Every call is passed on to glibc's __libc_* allocator. In a process without the
 * shim (uswap itself) it counts nothing and says nothing.
 *
 * A thread's kind is looked up once (PR_GET_NAME), only while managed: by then the engine's
 * threads are all started and named. Calls made after this library's destructor (engine
 * threads still run while the process exits) are not reported. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern int uswap_shim_managing(void) __attribute__((weak));

static unsigned long engine_calls, checked_calls, first_size;
#define SAMPLES 4
#define FRAMES 10
static struct { size_t size; void *frames[FRAMES]; int depth; char name[17]; } samples[SAMPLES];
static __thread int kind __attribute__((tls_model("initial-exec"))); /* 0 ?, 1 engine, 2 other */

static void note(size_t size) {
    if (!uswap_shim_managing || !uswap_shim_managing()) return;
    __atomic_fetch_add(&checked_calls, 1, __ATOMIC_RELAXED);
    if (kind == 0) {
        char name[17] = {0};
        prctl(PR_GET_NAME, name);
        kind = strncmp(name, "uswap-", 6) == 0 ? 1 : 2;
    }
    if (kind != 1) return;
    unsigned long n = __atomic_fetch_add(&engine_calls, 1, __ATOMIC_RELAXED);
    if (n == 0) __atomic_store_n(&first_size, size, __ATOMIC_RELAXED);
    if (n < SAMPLES) {
        samples[n].size = size;
        samples[n].depth = backtrace(samples[n].frames, FRAMES);
        prctl(PR_GET_NAME, samples[n].name);
    }
}

void *malloc(size_t n) { note(n); return __libc_malloc(n); }
void *calloc(size_t n, size_t m) { note(n * m); return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { note(n); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { note(n); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { note(n); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    if (a < sizeof(void *) || (a & (a - 1)) != 0) return EINVAL;
    note(n);
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

/* Appends the decimal digits of v to buf at *at. */
static void put_number(char *buf, size_t *at, unsigned long v) {
    char digits[24];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) buf[(*at)++] = digits[--n];
}

/* Appends text to buf at *at, at most 300 bytes of it (buf holds 1024: three of these
 * and the numbers fit). */
static void put_text(char *buf, size_t *at, const char *text) {
    for (int n = 0; *text && n < 300; n++) buf[(*at)++] = *text++;
}

__attribute__((destructor)) static void report(void) {
    if (!uswap_shim_managing) return;
    char buf[1024];
    size_t at = 0;
    put_text(buf, &at, "uswap-malloc-check: engine-thread calls ");
    put_number(buf, &at, __atomic_load_n(&engine_calls, __ATOMIC_RELAXED));
    put_text(buf, &at, ", checked calls ");
    put_number(buf, &at, __atomic_load_n(&checked_calls, __ATOMIC_RELAXED));
    put_text(buf, &at, ", first size ");
    put_number(buf, &at, __atomic_load_n(&first_size, __ATOMIC_RELAXED));
    buf[at++] = '\n';
    (void)!write(2, buf, at);
    unsigned long n = __atomic_load_n(&engine_calls, __ATOMIC_RELAXED);
    for (unsigned long i = 0; i < n && i < SAMPLES; i++) {
        at = 0;
        put_text(buf, &at, "uswap-malloc-check:   thread ");
        put_text(buf, &at, samples[i].name);
        put_text(buf, &at, " size ");
        put_number(buf, &at, samples[i].size);
        buf[at++] = '\n';
        (void)!write(2, buf, at);
        for (int f = 1; f < samples[i].depth; f++) {
            Dl_info info = {0};
            dladdr(samples[i].frames[f], &info);
            at = 0;
            put_text(buf, &at, "uswap-malloc-check:     ");
            put_text(buf, &at, info.dli_sname ? info.dli_sname : "?");
            put_text(buf, &at, " in ");
            put_text(buf, &at, info.dli_fname ? info.dli_fname : "?");
            put_text(buf, &at, " +0x");
            unsigned long off = (unsigned long)samples[i].frames[f] - (unsigned long)info.dli_fbase;
            char hex[17];
            int h = 0;
            do { hex[h++] = "0123456789abcdef"[off & 15]; off >>= 4; } while (off);
            while (h) buf[at++] = hex[--h];
            buf[at++] = '\n';
            (void)!write(2, buf, at);
        }
    }
}

/* backtrace() loads the unwinder (with malloc) at its first call: done here, at load. */
__attribute__((constructor)) static void load_the_unwinder(void) {
    void *frame[1];
    (void)backtrace(frame, 1);
}
