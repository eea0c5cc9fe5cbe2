/* device_revoked DIR: fills 32 MiB (most of it paged out under a small budget), says
 * "ready" (DIR/ready) and waits for DIR/go, by which time the test has taken away this
 * user's access to /dev/userfaultfd. Then a forked child checks every byte (its swap
 * comes from the device descriptor the image opened at its start), the buffer is written
 * to DIR/data through write(2) (kernel-mode faults), and the program execs itself: the new
 * image can have no userfaultfd, runs unmanaged, and checks the file and fresh memory.
 * Prints "child 0, second image ok"; exits 0 when all agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#define N (32u << 20)
static unsigned char pat(size_t i) { return (unsigned char)(i * 29 + (i >> 12) * 5 + 3); }
static int check(const unsigned char *p) { for (size_t i = 0; i < N; i++) if (p[i] != pat(i)) return 1; return 0; }
static char path[4096];
static const char *at(const char *dir, const char *name) { snprintf(path, sizeof path, "%s/%s", dir, name); return path; }
static int second(const char *dir, const char *child) {
    unsigned char *p = malloc(N);
    int fd = open(at(dir, "data"), O_RDONLY);
    size_t done = 0;
    while (fd >= 0 && done < N) { ssize_t n = read(fd, p + done, N - done); if (n <= 0) break; done += n; }
    int bad = done != N || check(p);
    for (size_t i = 0; i < N; i++) p[i] = (unsigned char)~pat(i);
    for (size_t i = 0; i < N; i++) if (p[i] != (unsigned char)~pat(i)) bad = 1;
    printf("child %s, second image %s\n", child, bad ? "bad" : "ok");
    return bad;
}
int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[2], "second") == 0) return second(argv[1], argv[3]);
    if (argc != 2) return 2;
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = pat(i);
    close(open(at(argv[1], "ready"), O_CREAT | O_WRONLY, 0644));
    for (int waited = 0; access(at(argv[1], "go"), F_OK) != 0; waited++) {
        if (waited > 60000) { fprintf(stderr, "no go\n"); return 3; }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    pid_t pid = fork();
    if (pid == 0) _exit(check(p));
    int status = 0;
    waitpid(pid, &status, 0);
    char child[16];
    snprintf(child, sizeof child, "%d", WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
    int fd = open(at(argv[1], "data"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || write(fd, p, N) != (ssize_t)N || close(fd)) { perror("data"); return 4; }
    fflush(stdout);
    execl("/proc/self/exe", argv[0], argv[1], "second", child, (char *)NULL);
    perror("exec");
    return 5;
}
