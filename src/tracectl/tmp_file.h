/* tmp_file.h: tracectl's temporary files next to an output (merge's OUT, spans' cursor file),
 * created so that a name someone else planted in a shared directory (/tmp) is never opened.
 * Single-threaded; no global state. */
#ifndef TRACEGATE_TRACECTL_TMP_FILE_H
#define TRACEGATE_TRACECTL_TMP_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Creates a new file in target's directory named TARGET.tmp-XXXXXXXX (random hex), with
 * O_CREAT|O_EXCL|O_NOFOLLOW and mode 0666 less the umask: an existing name (a symlink or file
 * another user planted) is never opened or followed, another name is tried. The name goes to tmp
 * (tmplen bytes). Returns the file open for writing, or NULL with the reason in err. The caller
 * writes, fcloses and renames tmp over target (atomic, and rename replaces a symlink at target
 * rather than following it), or removes tmp. */
FILE *tc_tmp_create(const char *target, char *tmp, size_t tmplen, char *err, size_t errlen);

#endif
