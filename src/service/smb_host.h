/* smb_host.h: the service side of a producer's shared memory buffer: creating
 * it (a sealed memfd named "perfetto_shmem", as traced does), adopting one the
 * producer created, sanitising the size/page-size hints, and unmapping.
 *
 * Reading chunks out of the mapping is in commit.c (CommitData, scraping),
 * always through the smb_abi helpers that copy before parsing: the producer
 * may rewrite any byte of this memory at any time.
 *
 * Ownership: a tg_smb_host owns its fd and mapping. Threading: service thread. */
#ifndef TRACEGATE_SERVICE_SMB_HOST_H
#define TRACEGATE_SERVICE_SMB_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "smb/smb_abi.h"

#define TG_SMB_DEFAULT_SIZE (256u * 1024u)
#define TG_SMB_DEFAULT_PAGE 4096u
#define TG_SMB_MAX_SIZE (32u * 1024u * 1024u)
#define TG_SMB_MAX_SERVICE_PAGE 32768u

struct tg_smb_host {
    int fd;       /* -1 when there is no SMB */
    void *map;    /* NULL when there is no SMB */
    struct tg_smb smb;
};

void tg_smb_host_init(struct tg_smb_host *h);
bool tg_smb_host_valid(const struct tg_smb_host *h);

/* traced's EnsureValidShmSizes: page 4/8/16/32 KiB, size a non-zero multiple
 * of the page size and at most 32 MiB. */
bool tg_smb_sizes_valid(size_t size, size_t page);
/* Picks size/page from hints (0 = default), clamps the size to 32 MiB and
 * falls back to 256 KiB / 4 KiB together when the pair is invalid. */
void tg_smb_sanitize_sizes(size_t *size, size_t *page);

/* Creates and maps a new SMB. Returns 0 or -1 (message in err). */
int tg_smb_host_create(struct tg_smb_host *h, size_t size, size_t page, char *err, size_t errlen);
/* Adopts a producer-created SMB fd (taken over: closed on failure). Needs
 * seals SHRINK|GROW|SEAL where memfd exists and a valid size/page pair.
 * Returns 0 or -1. */
int tg_smb_host_adopt(struct tg_smb_host *h, int fd, size_t page);
void tg_smb_host_release(struct tg_smb_host *h);

#endif
