/* smb_host.c: SMB creation (sealed memfd "perfetto_shmem"), adoption of a
 * producer-provided SMB and size sanitising (see service/smb_host.h). */
#include "config.h"

#include "service/smb_host.h"

#include "smb/smb_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif

#define REQUIRED_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

void tg_smb_host_init(struct tg_smb_host *h)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
}

bool tg_smb_host_valid(const struct tg_smb_host *h)
{
    return h->map != NULL;
}

bool tg_smb_sizes_valid(size_t size, size_t page)
{
    if (page != 4096 && page != 8192 && page != 16384 && page != 32768)
        return false;
    return size > 0 && size <= TG_SMB_MAX_SIZE && size % page == 0;
}

void tg_smb_sanitize_sizes(size_t *size, size_t *page)
{
    if (*page == 0)
        *page = TG_SMB_DEFAULT_PAGE;
    if (*size == 0)
        *size = TG_SMB_DEFAULT_SIZE;
    if (*size > TG_SMB_MAX_SIZE)
        *size = TG_SMB_MAX_SIZE;
    if (!tg_smb_sizes_valid(*size, *page)) {
        *size = TG_SMB_DEFAULT_SIZE;
        *page = TG_SMB_DEFAULT_PAGE;
    }
}

static int make_fd(size_t size)
{
    int fd = -1;
#ifdef HAVE_MEMFD_CREATE
    fd = memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
#endif
    if (fd < 0) {
        /* fallback: an unlinked temporary file */
        char path[] = "/tmp/perfetto-shmem-XXXXXX";
        fd = mkostemp(path, O_CLOEXEC);
        if (fd < 0)
            return -1;
        unlink(path);
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    /* best effort: fails harmlessly on the temp-file fallback */
    (void)fcntl(fd, F_ADD_SEALS, REQUIRED_SEALS);
    return fd;
}

static int map_fd(struct tg_smb_host *h, int fd, size_t size, size_t page)
{
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    if (tg_smb_init(&h->smb, m, size, page) != TG_SMB_OK) {
        munmap(m, size);
        errno = EINVAL;
        return -1;
    }
    h->fd = fd;
    h->map = m;
    return 0;
}

int tg_smb_host_create(struct tg_smb_host *h, size_t size, size_t page, char *err, size_t errlen)
{
    tg_smb_host_release(h);
    if (!tg_smb_sizes_valid(size, page)) {
        snprintf(err, errlen, "invalid SMB geometry %zu/%zu", size, page);
        return -1;
    }
    int fd = make_fd(size);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create the shared memory buffer: %s", strerror(errno));
        return -1;
    }
    if (map_fd(h, fd, size, page) != 0) {
        snprintf(err, errlen, "cannot map the shared memory buffer: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return 0;
}

int tg_smb_host_adopt(struct tg_smb_host *h, int fd, size_t page)
{
    tg_smb_host_release(h);
    if (fd < 0)
        return -1;
    size_t size;
    const char *why;
    if (tg_smb_fd_check(fd, &size, &why) != 0 || !tg_smb_sizes_valid(size, page)) {
        close(fd);
        return -1;
    }
    if (map_fd(h, fd, size, page) != 0) {
        close(fd);
        return -1;
    }
    /* the mapping keeps the memory; the service never hands a producer's own SMB back, so the
     * descriptor would only cost one fd per producer (half the budget at 10,000 producers) */
    close(fd);
    h->fd = -1;
    return 0;
}

void tg_smb_host_release(struct tg_smb_host *h)
{
    if (h->map)
        munmap(h->map, h->smb.size);
    if (h->fd >= 0)
        close(h->fd);
    tg_smb_host_init(h);
}
