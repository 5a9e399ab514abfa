/* file_trust.c: ownership and mode checks on files that decide access or hold secrets (see
 * base/file_trust.h). */
#include "base/file_trust.h"

#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

int tg_file_trust_check(int fd, const char *path, enum tg_file_trust how, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s: owned by uid %u, who could change it: it must belong to root or to uid %u",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen, "%s: writable by %s, who could change it (chmod go-w %s)", path,
                 (st.st_mode & S_IWOTH) ? "every user" : "its group", path);
        return -1;
    }
    if ((how & TG_FILE_SECRET) && (st.st_mode & (S_IRGRP | S_IROTH))) {
        snprintf(err, errlen, "%s: holds a secret but is readable by %s (chmod 600 %s)", path,
                 (st.st_mode & S_IROTH) ? "every user" : "its group", path);
        return -1;
    }
    if ((how & TG_FILE_PRIVATE_KEY) && (st.st_mode & S_IROTH)) {
        snprintf(err, errlen, "%s: holds a private key but every user can read it (chmod o-r %s)", path, path);
        return -1;
    }
    return 0;
}
