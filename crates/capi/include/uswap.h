/*
 * uswap.h: the Linux swap subsystem rebuilt in user space, as a C library (libuswap.so).
 *
 * A program maps managed memory with uswap_map(); uswap keeps at most a budget of it
 * resident, evicting cold pages to a zero map, a compressed pool and a swap file, and brings
 * them back when touched (through userfaultfd; no kernel module, no swapon).
 *
 *     struct uswap_config config;
 *     uswap_config_init(&config);
 *     config.budget_bytes = 256 << 20;
 *     uswap_t *swap;
 *     if (uswap_open(&config, &swap) != USWAP_OK)
 *         errx(1, "uswap: %s", uswap_last_error());
 *     uswap_region_t *region;
 *     uswap_map(swap, 1 << 30, &region);
 *     char *bytes = uswap_region_addr(region);   // plain memory from here on
 *     ...
 *     uswap_pageout(swap, bytes, uswap_region_len(region));   // evict now
 *     uswap_unmap(region);
 *     uswap_close(swap);
 *
 * Errors: every function that can fail returns 0 (USWAP_OK) or a negative USWAP_ERR_*
 * code, and uswap_last_error() gives a message for the calling thread's last failure that
 * says what is wrong and what to do. Bad input (a zero length, a budget smaller than one
 * folio, a swap file on a read-only path) and an unusable environment (userfaultfd blocked
 * by seccomp, no permission, a kernel too old) are reported before anything is registered.
 *
 * Threads: uswap runs a reclaimer, a fault handler and a copy-on-write breaker thread;
 * uswap_pageout() works on the calling thread. Every function may be called from any thread.
 *
 * Fork: a forked child reads its parent's evicted pages correctly (served by the parent's
 * handler), provided the process has CAP_SYS_PTRACE; without it, open with
 * USWAP_FLAG_EXCLUDE_FROM_FORK (children then do not inherit managed regions). A child must
 * not call uswap functions on its parent's objects (they return USWAP_ERR_CHILD).
 *
 * Delivery: USWAP_DELIVERY_HANDLER (the default) serves faults on a handler thread, also
 * those taken inside system calls (read(2) into an evicted buffer). USWAP_DELIVERY_SIGBUS
 * resolves a fault in the faulting thread (faster), but a system call into an evicted page
 * fails with EFAULT, and a forked child dies of SIGBUS when it touches one.
 */
#ifndef USWAP_H
#define USWAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
enum uswap_status {
    USWAP_OK = 0,
    /* A bad argument or configuration value (the message names it). */
    USWAP_ERR_INVALID = -1,
    /* userfaultfd is unusable: blocked by seccomp, not built into the kernel, or denied by a
     * security module. */
    USWAP_ERR_UNAVAILABLE = -2,
    /* No permission: to trap faults taken in kernel mode (root, CAP_SYS_PTRACE,
     * /dev/userfaultfd or vm.unprivileged_userfaultfd=1), or to serve forked children
     * (CAP_SYS_PTRACE). */
    USWAP_ERR_PERMISSION = -3,
    /* The kernel lacks a needed feature (the message names it and the release). */
    USWAP_ERR_KERNEL = -4,
    /* The swap file cannot be created or sized. */
    USWAP_ERR_SWAPFILE = -5,
    /* Another system error (mmap, a thread, an address outside managed memory, ...). */
    USWAP_ERR_SYSTEM = -6,
    /* Called in a forked child on an object of its parent. */
    USWAP_ERR_CHILD = -7,
};

/* Fault delivery (see the top of this file). */
enum uswap_delivery {
    USWAP_DELIVERY_DEFAULT = 0,
    USWAP_DELIVERY_HANDLER = 1,
    USWAP_DELIVERY_SIGBUS = 2,
};

/* Flags of struct uswap_config. */
/* Managed regions are not inherited by forked children (MADV_DONTFORK). */
#define USWAP_FLAG_EXCLUDE_FROM_FORK (1u << 0)
/* Start without permission to trap kernel-mode faults (a system call into an evicted page
 * then fails with EFAULT). */
#define USWAP_FLAG_NO_KERNEL_FAULTS (1u << 1)
/* Keep and check a crc32c per swap slot. */
#define USWAP_FLAG_CHECKSUMS (1u << 2)
/* Swap space in process memory instead of a file (for tests). */
#define USWAP_FLAG_SWAP_IN_MEMORY (1u << 3)
/* No compressed pool: evicted pages go straight to the swap file. */
#define USWAP_FLAG_NO_POOL (1u << 4)

struct uswap_config {
    /* sizeof(struct uswap_config), set by uswap_config_init: lets the library grow the
     * struct without breaking programs built against an older header. */
    uint32_t size;
    /* Order of the folios a first touch maps and page-out moves whole: 0 = 4 KiB,
     * 4 = 64 KiB, up to 9 = 2 MiB. Default 0. */
    uint32_t folio_order;
    /* Bytes the managed pages may occupy (resident, in flight, compressed). Default 256 MiB;
     * at least one folio. */
    uint64_t budget_bytes;
    /* enum uswap_delivery. */
    uint32_t delivery;
    /* USWAP_FLAG_*. */
    uint32_t flags;
    /* A new swap file at exactly this path (must not exist), or NULL. */
    const char *swap_path;
    /* A private, unlinked swap file in this directory when swap_path is NULL; NULL: the
     * temporary directory ($TMPDIR or /tmp). */
    const char *swap_dir;
    /* The swap device's size; sparse. Default 4 GiB. */
    uint64_t swap_size_bytes;
    /* Most pages read ahead of a swap-in fault; -1: the default; 0: off. */
    int32_t readahead_pages;
    /* The compressed pool's compressor: "lz4", "zstd", "zstd:1".."zstd:3", "none"; NULL: lz4. */
    const char *compressor;
    /* The pool's share of the budget, in percent; 0: the default (20). */
    uint32_t pool_percent;
};

/* A snapshot of the main counters (names as in /proc/vmstat where the kernel has one). */
struct uswap_stats {
    uint64_t budget_bytes;      /* the budget */
    uint64_t used_bytes;        /* charged now: resident + in flight + pool */
    uint64_t used_bytes_peak;   /* the highest charge seen */
    uint64_t resident_pages;    /* managed pages mapped now */
    uint64_t swap_inuse_pages;  /* swap slots in use */
    uint64_t zeromap_pages;     /* swapped-out pages that were all zero (no storage) */
    uint64_t pgfault;           /* faults handled */
    uint64_t pgmajfault;        /* faults that swapped in */
    uint64_t pswpin;            /* pages read from the swap file */
    uint64_t pswpout;           /* pages written to the swap file */
    uint64_t swpin_zero;        /* pages swapped in from the zero map */
    uint64_t swpout_zero;       /* pages swapped out as zero pages */
    uint64_t zswpin;            /* pages loaded from the compressed pool */
    uint64_t zswpout;           /* pages stored in the compressed pool */
    uint64_t pageout_pages;     /* pages taken out of the program */
    uint64_t forks;             /* forked children served */
};

typedef struct uswap uswap_t;
typedef struct uswap_region uswap_region_t;

/* Fills *config with the defaults (and its size). */
void uswap_config_init(struct uswap_config *config);

/* Validates the configuration, probes the kernel, and starts the swap. On success *out is a
 * new handle; on failure *out is NULL and nothing was started. */
int uswap_open(const struct uswap_config *config, uswap_t **out);

/* Releases the handle. Regions still mapped keep the swap running until they are unmapped. */
void uswap_close(uswap_t *swap);

/* Maps len bytes (rounded up to pages) of managed anonymous memory. len 0 is
 * USWAP_ERR_INVALID. */
int uswap_map(uswap_t *swap, size_t len, uswap_region_t **out);

/* The region's first byte and its length (a page multiple). */
void *uswap_region_addr(const uswap_region_t *region);
size_t uswap_region_len(const uswap_region_t *region);

/* Unmaps the region (its swapped pages are dropped) and frees the handle. */
int uswap_unmap(uswap_region_t *region);

/* Pages out the resident managed pages in [addr, addr + len) now (like MADV_PAGEOUT).
 * Returns the pages paged out (>= 0), or a negative USWAP_ERR_* code. */
int64_t uswap_pageout(uswap_t *swap, void *addr, size_t len);

/* Changes the budget while the swap runs: a smaller one is reclaimed down to in the
 * background, a larger one takes effect at once. Below one folio: USWAP_ERR_INVALID,
 * nothing changes. */
int uswap_set_budget(uswap_t *swap, uint64_t budget_bytes);

/* Fills *out with the counters. */
int uswap_stats(uswap_t *swap, struct uswap_stats *out);

/* "handler" or "sigbus". */
const char *uswap_delivery_name(const uswap_t *swap);

/* The message of the calling thread's last failure ("" if none); valid until its next
 * failing call. */
const char *uswap_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* USWAP_H */
