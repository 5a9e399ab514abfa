/* smb_host.c: SMB creation (tg_smb_fd_create: a sealed memfd), adoption of a
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
    int fd = tg_smb_fd_create(size);
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
