/* Large stdio transfers, which glibc makes with system calls of its own straight from or
 * into the program's buffer (no wrapper of read/write sees them), and the fortified read
 * (`__read_chk`): fwrite of 32 MiB that is mostly swapped out, fread and fread_unlocked of
 * it into fresh buffers (never touched: not resident), items of 4 KiB and of 1 byte, and
 * `__read_chk` into a fresh heap buffer. Every byte checked; prints a line
 * and exits 0. Under `uswap run --delivery sigbus` each such call met EFAULT and the shim
 * made it again after bringing the buffer in (crates/preload/src/stdio.rs, io.rs). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define N (32u << 20)
static unsigned char pat(size_t i) { return (unsigned char)(i * 29 + (i >> 12) * 3 + 5); }
static int check(const unsigned char *p, size_t from, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(from + i)) { fprintf(stderr, "%s: byte %zu is %u, not %u\n", what, from + i, p[i], pat(from + i)); return 1; }
    return 0;
}
struct chunk { unsigned char b[1 << 20]; };
/* What a _FORTIFY_SOURCE build calls for read(2) into a buffer of known size; called by
 * name here, so the test does not depend on the compiler's choice. */
extern ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);
int main(void) {
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = pat(i);
    char path[] = "/tmp/stdio_big.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); return 1; }
    FILE *f = fdopen(fd, "w+");
    if (fwrite(p, 1, N, f) != N || fflush(f)) { perror("fwrite"); return 2; }
    unlink(path);
    /* Fresh buffers, given time to be adopted (the shim's scan runs every 10 ms). */
    unsigned char *a = malloc(N / 2), *b = malloc(N / 2);
    usleep(100000);
    rewind(f);
    if (fread(a, 4096, N / 2 / 4096, f) != N / 2 / 4096 || ferror(f)) { perror("fread"); return 3; }
    if (fread_unlocked(b, 1, N / 2, f) != N / 2 || ferror(f)) { perror("fread_unlocked"); return 4; }
    if (check(a, 0, N / 2, "fread") || check(b, N / 2, N / 2, "fread_unlocked")) return 5;
    struct chunk *c = malloc(sizeof *c);
    usleep(100000);
    if (pread(fd, c->b, 1, 0) != 1) { perror("pread"); return 6; }
    if (lseek(fd, 4096, SEEK_SET) != 4096) return 7;
    size_t got = 0;
    while (got < sizeof c->b) {
        ssize_t r = __read_chk(fd, c->b + got, sizeof c->b - got, sizeof c->b - got);
        if (r <= 0) { perror("read"); return 8; }
        got += (size_t)r;
    }
    if (check(c->b, 4096, sizeof c->b, "fortified read")) return 9;
    printf("stdio_big: fwrite, fread, fread_unlocked and a fortified read of swapped or fresh buffers, every byte checked\n");
    return 0;
}
