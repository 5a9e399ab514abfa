/* file_trust.c: ownership and mode checks on files that decide access or hold secrets (see
 * base/file_trust.h). */
#include "base/file_trust.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
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

/* nftw passes no user pointer: the walk's result lives per thread */
static _Thread_local struct {
    char *err;
    size_t errlen;
} g_walk;

static int refuse_world_writable(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_NS || type == FTW_DNR) {
        snprintf(g_walk.err, g_walk.errlen, "%s: cannot %s it", path, type == FTW_NS ? "stat" : "read");
        return 1;
    }
    if (type == FTW_SL || !(st->st_mode & S_IWOTH))
        return 0;
    snprintf(g_walk.err, g_walk.errlen, "%s: writable by every user, who could change what is served (chmod o-w %s)",
             path, path);
    return 1;
}

int tg_file_trust_tree(const char *dir, char *err, size_t errlen)
{
    g_walk.err = err;
    g_walk.errlen = errlen;
    int rc = nftw(dir, refuse_world_writable, 16, FTW_PHYS);
    if (rc < 0) {
        snprintf(err, errlen, "%s: cannot walk it: %s", dir, strerror(errno));
        return -1;
    }
    return rc == 0 ? 0 : -1;
}
