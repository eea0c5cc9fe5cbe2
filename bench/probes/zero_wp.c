/* What the write-protected zero page costs through userfaultfd (ARCHITECTURE.md departure
 * 26), and the facts it rests on. On a range registered MISSING | WP, with a handler
 * thread: a read maps the zero page (ZEROPAGE without waking, WRITEPROTECT, WAKE); a
 * write to it arrives as a fault flagged WP | WRITE and goes through once the protection
 * is lifted; UFFDIO_MOVE takes a written page, and a protected zero page, out of the
 * range. Then, from one thread, 10,000 pages each: UFFDIO_ZEROPAGE alone, and
 * ZEROPAGE without waking + WRITEPROTECT + WAKE, ns a page.
 * Build and run: gcc -O2 -pthread -o /tmp/zero_wp bench/probes/zero_wp.c && /tmp/zero_wp
 * (docs/benchmarks.md, "Probes"). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Newer than the 6.1 headers. */
#ifndef UFFDIO_MOVE
struct uffdio_move { __u64 dst, src, len, mode; __s64 move; };
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#define UFFD_FEATURE_MOVE (1 << 16)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES (1ULL << 1)
#endif

static int uffd;
static char *area;
static const long P = 4096;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void map_zero_protected(unsigned long addr, long len)
{
    struct uffdio_zeropage z = {{addr, len}, UFFDIO_ZEROPAGE_MODE_DONTWAKE};
    if (ioctl(uffd, UFFDIO_ZEROPAGE, &z))
        perror("UFFDIO_ZEROPAGE");
    struct uffdio_writeprotect w = {{addr, len}, UFFDIO_WRITEPROTECT_MODE_WP};
    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w))
        perror("UFFDIO_WRITEPROTECT");
    struct uffdio_range r = {addr, len};
    ioctl(uffd, UFFDIO_WAKE, &r);
}

static void *handler(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p = {uffd, POLLIN, 0};
        poll(&p, 1, -1);
        struct uffd_msg m;
        if (read(uffd, &m, sizeof m) <= 0 || m.event != UFFD_EVENT_PAGEFAULT)
            continue;
        unsigned long addr = m.arg.pagefault.address & ~(P - 1);
        printf("fault at page %lu, flags %#llx\n", (addr - (unsigned long)area) / P,
               (unsigned long long)m.arg.pagefault.flags);
        if (m.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) {
            struct uffdio_writeprotect w = {{addr, P}, 0};
            if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w))
                perror("unprotect");
        } else {
            map_zero_protected(addr, P);
        }
    }
    return NULL;
}

static char *registered(long pages, __u64 mode)
{
    char *p = mmap(NULL, pages * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct uffdio_register reg = {{(unsigned long)p, pages * P}, mode};
    if (p == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &reg))
        perror("register");
    return p;
}

int main(void)
{
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = {UFFD_API, UFFD_FEATURE_MOVE | UFFD_FEATURE_PAGEFAULT_FLAG_WP, 0};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
        perror("userfaultfd");
        return 1;
    }
    __u64 both = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP;
    area = registered(64, both);
    pthread_t t;
    pthread_create(&t, NULL, handler, NULL);
    volatile char c = area[0];
    printf("read %d\n", c);
    area[0] = 5;
    printf("written %d\n", area[0]);
    volatile char d = area[2 * P];
    (void)d;
    char *out = registered(2, UFFDIO_REGISTER_MODE_MISSING);
    struct uffdio_move mv = {(unsigned long)out, (unsigned long)area, P, 0, 0};
    if (ioctl(uffd, UFFDIO_MOVE, &mv))
        perror("move of the written page");
    else
        printf("moved the written page: %d\n", out[0]);
    struct uffdio_move mz = {(unsigned long)out + P, (unsigned long)area + 2 * P, P,
                             UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES, 0};
    if (ioctl(uffd, UFFDIO_MOVE, &mz))
        perror("move of the protected zero page");
    else
        printf("moved the protected zero page: %lld bytes\n", (long long)mz.move);
    long n = 20000;
    char *b = registered(n, both);
    double t0 = now_ns();
    for (long i = 0; i < n / 2; i++) {
        struct uffdio_zeropage z = {{(unsigned long)b + i * P, P}, 0};
        ioctl(uffd, UFFDIO_ZEROPAGE, &z);
    }
    double t1 = now_ns();
    for (long i = n / 2; i < n; i++)
        map_zero_protected((unsigned long)b + i * P, P);
    double t2 = now_ns();
    printf("UFFDIO_ZEROPAGE %.0f ns a page; ZEROPAGE + WRITEPROTECT + WAKE %.0f ns a page\n",
           (t1 - t0) / (n / 2), (t2 - t1) / (n / 2));
    return 0;
}
