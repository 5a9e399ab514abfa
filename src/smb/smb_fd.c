/* smb_fd.c: making a sealed SMB descriptor and checking the sealing and size of a peer's (see
 * smb/smb_fd.h). */
#include "config.h"

#include "smb/smb_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif

#define REQUIRED_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool have_memfd;

static void probe_memfd(void)
{
#ifdef HAVE_MEMFD_CREATE
    int fd = memfd_create("tracegate_probe", MFD_CLOEXEC);
    if (fd >= 0) {
        have_memfd = true;
        close(fd);
    }
#endif
}

int tg_smb_fd_check(int fd, size_t *size, const char **why)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        *why = "cannot stat the descriptor";
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = "the descriptor is not a shared memory file";
        return -1;
    }
    if (st.st_size <= 0 || (unsigned long long)st.st_size > TG_SMB_FD_MAX_SIZE) {
        *why = "its size is 0 or over 32 MiB";
        return -1;
    }
    pthread_once(&probe_once, probe_memfd);
    if (have_memfd) {
        int seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0 || (seals & REQUIRED_SEALS) != REQUIRED_SEALS) {
            *why = "it is not sealed against resizing (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL)";
            return -1;
        }
    }
    *size = (size_t)st.st_size;
    return 0;
}

int tg_smb_fd_create(size_t size)
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
