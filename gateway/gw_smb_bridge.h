/* gw_smb_bridge.h: lets a producer that cannot map shared memory (it reached
 * tracegated over TCP, TLS or WebSocket) use a service that hands out a real
 * SMB over a UNIX socket (the embedded service or a real traced).
 *
 * Toward the remote producer the gateway offers shmem emulation
 * (InitializeConnectionResponse.use_shmem_emulation = true), so the producer
 * sends whole chunks inline in CommitData. Toward the service the gateway is
 * a local producer: it keeps the SMB fd the service sends with SetupTracing,
 * copies each inline chunk into a free chunk of that SMB (Free ->
 * BeingWritten -> Complete, as a producer would), and rewrites CommitData to
 * name those chunks (page, chunk) instead of carrying data. Patches and
 * flush acks pass through unchanged: the copied chunk headers keep the
 * producer's writer ids and chunk ids.
 *
 * When the SMB has no room for a whole CommitData, the call returns
 * TG_SMBB_RETRY and copies nothing: the caller pauses the producer and offers
 * the same frame again a little later (the service frees chunks as it reads
 * them). A chunk marked chunk_incomplete (scraped by the producer while it
 * was still being written; it comes again, complete, later) is not copied:
 * it stays inline, zero-padded to the SMB's chunk size and with `page` 0, so
 * that the service keeps it as incomplete and takes the complete copy later
 * (a chunk named in the SMB would be read as complete, which cannot grow).
 *
 * Ownership: one bridge per producer connection; it owns the SMB mapping.
 * Threading: single-threaded (the gateway loop). */
#ifndef TRACEGATE_GATEWAY_GW_SMB_BRIDGE_H
#define TRACEGATE_GATEWAY_GW_SMB_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/frame.h"

struct tg_smb_bridge;

enum tg_smbb_verdict {
    TG_SMBB_ERROR = -1,   /* protocol violation: close the producer (message in err) */
    TG_SMBB_FORWARD = 0,  /* forward the frame unchanged */
    TG_SMBB_REPLACED = 1, /* forward *out instead (malloc'd body; caller frees) */
    TG_SMBB_RETRY = 2,    /* SMB full, or the rewritten request would not fit one IPC frame: pause the
                           * producer, split the frame into one request per inline chunk (the
                           * filter's split_head) and offer the parts in turn */
};

struct tg_smb_bridge_stats {
    uint64_t chunks_copied;
    uint64_t bytes_copied;
    uint64_t commits_rewritten;
    uint64_t retries;
};

struct tg_smb_bridge *tg_smb_bridge_new(void);
void tg_smb_bridge_free(struct tg_smb_bridge *b);

/* A frame from the producer. `method` is the invoked method's name (NULL if
 * the frame is not an InvokeMethod of ProducerPort). */
enum tg_smbb_verdict tg_smb_bridge_from_producer(struct tg_smb_bridge *b, const char *method,
                                                 const struct tg_frame_info *fi, uint8_t **out, size_t *out_len,
                                                 char *err, size_t errlen);

/* A frame from the service. `method` names the request this reply answers
 * (NULL if unknown). fd is the descriptor that came with the frame (-1 if
 * none); the bridge takes ownership of it. */
enum tg_smbb_verdict tg_smb_bridge_from_service(struct tg_smb_bridge *b, const char *method,
                                                const struct tg_frame_info *fi, int fd, uint8_t **out,
                                                size_t *out_len, char *err, size_t errlen);

void tg_smb_bridge_get_stats(const struct tg_smb_bridge *b, struct tg_smb_bridge_stats *st);
int tg_smb_bridge_has_smb(const struct tg_smb_bridge *b);

#endif
