/* Reads 32 MiB it never wrote (zero pages: under --zero-pages protected, mapped
 * write-protected and charged nothing), writes every other page (a write-protect fault
 * each; most then paged out under the small budget), and forks. The child writes the pages
 * still zero, which it inherited write-protected, and checks everything; the parent then
 * reads into one of its zero pages with read(2) (a kernel-mode write-protect fault) and
 * checks its own copy. Exit 0 when all agree. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#define N (32u << 20)
#define PG 4096u
static unsigned char val(size_t pg) { return (unsigned char)(pg * 7 % 255 + 1); }
static int check(const unsigned char *p, const char *who, unsigned char odd, size_t odd_pg,
                 unsigned char odd_val) {
    for (size_t pg = 0; pg < N / PG; pg++) {
        unsigned char want = pg % 2 == 0 ? val(pg) : pg == odd_pg ? odd_val : odd;
        for (size_t i = 0; i < PG; i++)
            if (p[pg * PG + i] != want) {
                fprintf(stderr, "%s: page %zu byte %zu is %u, not %u\n", who, pg, i,
                        p[pg * PG + i], want);
                return 1;
            }
    }
    return 0;
}
int main(void) {
    unsigned char *p = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    unsigned long sum = 0;
    for (size_t i = 0; i < N; i += 64) sum += p[i];
    if (sum) return 3;
    for (size_t pg = 0; pg < N / PG; pg += 2) memset(p + pg * PG, val(pg), PG);
    pid_t pid = fork();
    if (pid == 0) {
        for (size_t pg = 1; pg < N / PG; pg += 2) memset(p + pg * PG, 0x55, PG);
        _exit(check(p, "child", 0x55, 0, 0x55));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int fds[2];
    unsigned char buf[PG];
    memset(buf, 0x77, PG);
    if (pipe(fds) || write(fds[1], buf, PG) != PG || read(fds[0], p + 3 * PG, PG) != PG) return 4;
    int bad = check(p, "parent", 0, 3, 0x77);
    int child = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    printf("zero child %d parent %d\n", child, bad);
    return child == 0 && !bad ? 0 : 1;
}
