/*
 * round_trip.c: libuswap.so from C. Refuses bad input with a code and a message, then
 * writes a region larger than the budget, pages it all out, reads every word back.
 *
 *   cc -I include examples/round_trip.c -L <dir> -luswap -o round_trip
 *   ./round_trip [handler|sigbus|blocked]
 *
 * "blocked" first installs a seccomp filter that makes userfaultfd(2) fail (as Docker's
 * default profile does) and checks that uswap_open says so.
 *
 * Exit status: 0 all checks passed, 1 a check failed, 77 userfaultfd is unavailable here.
 */
#include "uswap.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

_Static_assert(sizeof(struct uswap_config) == 72, "struct uswap_config layout");
_Static_assert(sizeof(struct uswap_stats) == 16 * 8, "struct uswap_stats layout");

#define PAGE 4096
#define REGION (32u << 20)

static int failures;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* Opening with `config` must fail with `expected` and a message containing `needle`. */
static void refused(const struct uswap_config *config, int expected, const char *needle)
{
    uswap_t *swap = (uswap_t *)1;
    int rc = uswap_open(config, &swap);
    CHECK(rc == expected, "open returned %d, expected %d (%s)", rc, expected,
          uswap_last_error());
    CHECK(swap == NULL, "a failed open leaves *out NULL");
    CHECK(strstr(uswap_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"",
          uswap_last_error(), needle);
}

static void bad_input(void)
{
    struct uswap_config config;
    uswap_config_init(&config);
    config.budget_bytes = 32 << 10;
    config.folio_order = 4;
    refused(&config, USWAP_ERR_INVALID, "smaller than one folio");

    uswap_config_init(&config);
    config.delivery = 9;
    refused(&config, USWAP_ERR_INVALID, "delivery 9");

    uswap_config_init(&config);
    config.compressor = "brotli";
    refused(&config, USWAP_ERR_INVALID, "compressor \"brotli\"");

    uswap_config_init(&config);
    config.swap_path = "/proc/uswap-swap";
    config.swap_size_bytes = 64 << 20;
    refused(&config, USWAP_ERR_SWAPFILE, "/proc/uswap-swap");
}

/* userfaultfd(2) -> ENOSYS for this process, then uswap_open must say it is blocked. */
static int blocked(void)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("seccomp");
        return 1;
    }
    struct uswap_config config;
    uswap_config_init(&config);
    refused(&config, USWAP_ERR_UNAVAILABLE, "seccomp");
    printf("blocked: %s\n", uswap_last_error());
    return failures == 0 ? 0 : 1;
}

static uint64_t word(size_t page, size_t w)
{
    return (uint64_t)page * 1000003u + w * 7u + 1u;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "handler";
    if (strcmp(mode, "blocked") == 0)
        return blocked();
    bad_input();

    struct uswap_config config;
    uswap_config_init(&config);
    config.budget_bytes = 8 << 20;
    config.swap_size_bytes = 64 << 20;
    config.delivery = strcmp(mode, "sigbus") == 0 ? USWAP_DELIVERY_SIGBUS : USWAP_DELIVERY_HANDLER;
    uswap_t *swap;
    int rc = uswap_open(&config, &swap);
    if (rc == USWAP_ERR_UNAVAILABLE || rc == USWAP_ERR_PERMISSION) {
        fprintf(stderr, "skipping: %s\n", uswap_last_error());
        return 77;
    }
    CHECK(rc == USWAP_OK, "open: %s", uswap_last_error());
    if (rc != USWAP_OK)
        return 1;
    CHECK(strcmp(uswap_delivery_name(swap), mode) == 0, "delivery %s", uswap_delivery_name(swap));

    uswap_region_t *region = (uswap_region_t *)1;
    rc = uswap_map(swap, 0, &region);
    CHECK(rc == USWAP_ERR_INVALID && region == NULL, "map(0) returned %d", rc);
    CHECK(strstr(uswap_last_error(), "length zero") != NULL, "map(0): %s", uswap_last_error());

    rc = uswap_map(swap, REGION, &region);
    CHECK(rc == USWAP_OK, "map: %s", uswap_last_error());
    if (rc != USWAP_OK)
        return 1;
    uint64_t *words = uswap_region_addr(region);
    size_t pages = uswap_region_len(region) / PAGE;
    CHECK(uswap_region_len(region) == REGION, "length %zu", uswap_region_len(region));
    for (size_t p = 0; p < pages; p++)
        for (size_t w = 0; w < PAGE / 8; w += 64)
            words[p * (PAGE / 8) + w] = word(p, w);

    int64_t paged = uswap_pageout(swap, words, REGION);
    CHECK(paged >= 0, "pageout: %s", uswap_last_error());
    int64_t outside = uswap_pageout(swap, (void *)PAGE, PAGE);
    CHECK(outside == USWAP_ERR_INVALID, "pageout outside managed memory returned %lld",
          (long long)outside);

    size_t wrong = 0;
    for (size_t p = 0; p < pages; p++)
        for (size_t w = 0; w < PAGE / 8; w += 64)
            wrong += words[p * (PAGE / 8) + w] != word(p, w);
    CHECK(wrong == 0, "%zu words read back wrong", wrong);

    struct uswap_stats stats;
    CHECK(uswap_stats(swap, &stats) == USWAP_OK, "stats: %s", uswap_last_error());
    CHECK(stats.pageout_pages >= pages - (8u << 20) / PAGE, "only %llu pages paged out",
          (unsigned long long)stats.pageout_pages);
    CHECK(stats.pgmajfault > 0, "no swap-in");
    CHECK(stats.zswpout > 0, "the pool stored nothing");
    CHECK(stats.used_bytes_peak <= stats.budget_bytes + (2u << 20), "peak %llu over budget",
          (unsigned long long)stats.used_bytes_peak);
    printf("%s: %zu pages written, %lld paged out by uswap_pageout, %llu taken in all, "
           "pgfault %llu, pgmajfault %llu, zswpout %llu, zswpin %llu, pswpout %llu, pswpin %llu, "
           "peak %llu of %llu bytes\n",
           mode, pages, (long long)paged, (unsigned long long)stats.pageout_pages,
           (unsigned long long)stats.pgfault, (unsigned long long)stats.pgmajfault,
           (unsigned long long)stats.zswpout, (unsigned long long)stats.zswpin,
           (unsigned long long)stats.pswpout, (unsigned long long)stats.pswpin,
           (unsigned long long)stats.used_bytes_peak, (unsigned long long)stats.budget_bytes);

    /* The budget moves while the swap runs: a budget below one folio is refused, a
     * smaller one is kept (by the background reclaimer) and the data still reads back. */
    CHECK(uswap_set_budget(swap, 1) == USWAP_ERR_INVALID, "a 1-byte budget was accepted");
    CHECK(uswap_set_budget(swap, 4u << 20) == USWAP_OK, "set_budget: %s", uswap_last_error());
    CHECK(uswap_stats(swap, &stats) == USWAP_OK, "stats: %s", uswap_last_error());
    CHECK(stats.budget_bytes == 4u << 20, "budget %llu after set_budget",
          (unsigned long long)stats.budget_bytes);
    wrong = 0;
    for (size_t p = 0; p < pages; p++)
        for (size_t w = 0; w < PAGE / 8; w += 64)
            wrong += words[p * (PAGE / 8) + w] != word(p, w);
    CHECK(wrong == 0, "%zu words read back wrong under the smaller budget", wrong);

    CHECK(uswap_unmap(region) == USWAP_OK, "unmap: %s", uswap_last_error());
    uswap_close(swap);
    return failures == 0 ? 0 : 1;
}
