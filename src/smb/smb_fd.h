/* smb_fd.h: a shared memory buffer's file descriptor: made sealed, and checked
 * when received from the other side of a producer connection, before it is mapped.
 *
 * Whoever maps a peer's SMB trusts the peer not to resize it afterwards: a
 * file shrunk under a mapping turns every later access into SIGBUS. traced
 * and its SDK therefore only accept a memfd sealed against shrinking, growing
 * and further sealing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), whenever
 * the kernel has memfds. Both sides of tracegate use this one check: the
 * service adopting a producer-provided SMB, and the producer library mapping
 * the SMB the service (or a gateway) hands it.
 *
 * Threading: any thread; no state beyond a once-only probe for memfd support. */
#ifndef TRACEGATE_SMB_FD_H
#define TRACEGATE_SMB_FD_H

#include <stddef.h>

/* Largest SMB either side maps (traced's limit, and the service's). */
#define TG_SMB_FD_MAX_SIZE (32u * 1024u * 1024u)

/* 0 when fd is a regular file of 1..TG_SMB_FD_MAX_SIZE bytes that is sealed
 * as above (the seals are only required when this kernel supports memfds);
 * its size in *size. -1 otherwise, with a static reason in *why. Never closes
 * fd. */
int tg_smb_fd_check(int fd, size_t *size, const char **why);

/* A new SMB file of size bytes, as traced makes one: a memfd named "perfetto_shmem" sealed as
 * above (an unlinked temporary file, unsealed, where memfds are missing). The descriptor, or -1
 * with errno. */
int tg_smb_fd_create(size_t size);

#endif
