/* tmp_file.c: exclusive creation of tracectl's temporary files next to an output (tmp_file.h). */
#include "tmp_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define TMP_TRIES 64

static uint32_t tmp_random(uint32_t salt)
{
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
        return r;
    /* no entropy yet: O_EXCL keeps any name safe, randomness only avoids planted names */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)ts.tv_nsec ^ ((uint32_t)getpid() << 16) ^ (salt * 2654435761u);
}

FILE *tc_tmp_create(const char *target, char *tmp, size_t tmplen, char *err, size_t errlen)
{
    int e = EEXIST;
    for (uint32_t i = 0; i < TMP_TRIES; i++) {
        int n = snprintf(tmp, tmplen, "%s.tmp-%08x", target, tmp_random(i));
        if (n < 0 || (size_t)n >= tmplen) {
            snprintf(err, errlen, "%s: the path is too long", target);
            return NULL;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0) {
            e = errno;
            if (e == EEXIST || e == ELOOP)
                continue; /* someone else's name: never touched, try another */
            break;
        }
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            e = errno;
            close(fd);
            unlink(tmp);
            break;
        }
        return f;
    }
    snprintf(err, errlen, "cannot create a temporary file next to %s: %s", target, strerror(e));
    return NULL;
}
