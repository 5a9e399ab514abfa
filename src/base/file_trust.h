/* file_trust.h: checks on a file that decides who gets in (a token list, a config file) or holds
 * a secret (a plaintext token), made on the opened descriptor before it is read.
 *
 * A file another user can write lets that user grant themselves any role; a secret others can
 * read is theirs too. As sshd's StrictModes and PostgreSQL's key check do, such a file is refused
 * with a message saying how to fix it, instead of trusted.
 *
 * Threading: any thread; no state. */
#ifndef TG_BASE_FILE_TRUST_H
#define TG_BASE_FILE_TRUST_H

#include <stddef.h>

enum tg_file_trust {
    TG_FILE_DECIDES_ACCESS = 1, /* nobody but its owner (root or this process's user) may write it */
    TG_FILE_SECRET = 2,         /* ... nor read it */
    TG_FILE_PRIVATE_KEY = 4,    /* a TLS private key: nobody but its owner may write it, and others
                                 * (not its group: Debian's ssl-cert group) may not read it */
};

/* 0 when the file open as fd (named path in messages) is a regular file owned by root or by this
 * process's effective uid, not writable by group or others, and (TG_FILE_SECRET) not readable by
 * them either, or (TG_FILE_PRIVATE_KEY) not readable by others. -1 with the reason and the fix in err otherwise. */
int tg_file_trust_check(int fd, const char *path, enum tg_file_trust how, char *err, size_t errlen);

/* 0 when no directory or file below dir (dir included; symlinks are not followed) can be written
 * by every user: whoever could would choose what is served from it (a web root serves the UI that
 * runs with the gateway's origin in a browser). Group-writable trees are the operator's choice (a
 * deploy group) and pass. -1 with the first offending path and the fix in err otherwise, or when
 * dir cannot be walked. The walk keeps its state per thread. */
int tg_file_trust_tree(const char *dir, char *err, size_t errlen);

#endif
