/* For `uswap run --delivery sigbus`: under a small budget, moves a buffer mostly swapped
 * out through a file (write, pread) and over stream sockets to a child and back (writev
 * and sendmsg out, read and recvmsg back), whose kernel-mode copies fail with EFAULT until
 * the shim brings the buffer in; then a vfork child (same address space) reads swapped
 * pages, served in its own SIGBUS handler. Every byte checked; prints a line and exits 0
 * when all agree. Argument: MiB (default 64). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/uio.h>
#include <errno.h>
#include <sys/socket.h>
#define MB (1024*1024)
static unsigned char pat(size_t i, int salt) { return (unsigned char)((i * 131 + (i >> 12) * 7 + salt) & 0xff); }
int main(int argc, char **argv) {
    size_t size = (argc > 1 ? atoi(argv[1]) : 64) * (size_t)MB;
    unsigned char *src = mmap(NULL, size, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    unsigned char *dst = mmap(NULL, size, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED) { perror("mmap"); return 1; }
    usleep(50000); // let the shim register the mappings
    for (size_t i = 0; i < size; i++) src[i] = pat(i, 1);
    for (size_t i = 0; i < size; i += 4096) dst[i] = 0xAA; // make dst resident, then evicted
    for (size_t i = 0; i < size; i++) src[i] = pat(i, 2);  // src evicted again behind us
    // a file: write the whole of src in one call, read it back into dst in one call
    char path[] = "/tmp/sigbus_io.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); return 1; }
    unlink(path);
    size_t done = 0;
    while (done < size) { ssize_t n = write(fd, src + done, size - done); if (n < 0) { perror("write"); return 2; } done += n; }
    done = 0;
    while (done < size) { ssize_t n = pread(fd, dst + done, size - done, done); if (n < 0) { perror("pread"); return 3; } if (n == 0) break; done += n; }
    for (size_t i = 0; i < size; i++) if (dst[i] != pat(i, 2)) { fprintf(stderr, "file: byte %zu is %u, wrote %u\n", i, dst[i], pat(i, 2)); return 4; }
    // sockets through a child: the parent sends chunks of src (writev, sendmsg), reads them back (read, recvmsg)
    int to[2], back[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, to) || socketpair(AF_UNIX, SOCK_STREAM, 0, back)) { perror("socketpair"); return 1; }
    pid_t child = fork();
    if (child == 0) {
        char buf[65536]; ssize_t n;
        close(to[1]); close(back[0]);
        while ((n = read(to[0], buf, sizeof buf)) > 0) { ssize_t w = 0; while (w < n) { ssize_t k = write(back[1], buf + w, n - w); if (k < 0) _exit(9); w += k; } }
        shutdown(back[1], SHUT_WR);
        _exit(0);
    }
    close(to[0]); close(back[1]);
    for (size_t i = 0; i < size; i++) dst[i] = 0; // dst resident; then src's pages evict it
    for (size_t i = 0; i < size; i++) src[i] = pat(i, 3);
    size_t sent = 0, got = 0;
    while (got < size) {
        if (sent < size && sent - got < 64 * 1024) {
            size_t chunk = size - sent < 32 * 1024 ? size - sent : 32 * 1024;
            struct iovec v[2] = {{src + sent, chunk / 2}, {src + sent + chunk / 2, chunk - chunk / 2}};
            struct msghdr m = {0};
            m.msg_iov = v; m.msg_iovlen = 2;
            ssize_t n = (sent / chunk) % 2 ? sendmsg(to[1], &m, 0) : writev(to[1], v, 2);
            if (n < 0) { perror("writev/sendmsg"); return 5; }
            sent += n;
            if (sent == size) shutdown(to[1], SHUT_WR);
        }
        struct iovec r = {dst + got, size - got};
        struct msghdr rm = {0};
        rm.msg_iov = &r; rm.msg_iovlen = 1;
        ssize_t n = got % 3 ? recvmsg(back[0], &rm, 0) : read(back[0], dst + got, size - got);
        if (n < 0) { perror("read"); return 6; }
        if (n == 0) break;
        got += n;
    }
    int status; waitpid(child, &status, 0);
    if (got != size) { fprintf(stderr, "sockets: got %zu of %zu\n", got, size); return 7; }
    for (size_t i = 0; i < size; i++) if (dst[i] != pat(i, 3)) { fprintf(stderr, "sockets: byte %zu is %u, wrote %u\n", i, dst[i], pat(i, 3)); return 8; }
    for (size_t i = 0; i < size; i++) dst[i] = (unsigned char)i; // src swapped out again
    pid_t v = vfork();
    if (v == 0) {
        for (size_t i = 0; i < size; i += 4096 * 3)
            if (src[i] != pat(i, 3)) _exit(10);
        _exit(0);
    }
    if (waitpid(v, &status, 0) != v || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "vfork child: status %d\n", status);
        return 9;
    }
    printf("sigbus_io: %zu MiB through a file and sockets, and read by a vfork child, every byte checked\n", size / MB);
    return 0;
}
