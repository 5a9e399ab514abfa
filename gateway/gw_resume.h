/* gw_resume.h: session survival for the gateway's consumer clients.
 *
 * Registers the TracegateSession local service (GetResumeToken, Resume; see
 * src/protos/tracegate_gateway.proto) and a bridge filter on consumer-port
 * sessions. A client that asked for a resume token and drops while it has a
 * tracing session (or calls in flight) is detached instead of closed: its
 * upstream connection, and so its tracing session, stays for the resume
 * window while what the service sends is buffered (bounded). A new connection
 * that presents the token (Resume) takes the session over: the frames lost in
 * flight are re-sent (when the client says how many it received and the
 * gateway still holds them), then the buffered frames are replayed in order,
 * then forwarding resumes. When the window ends (or the buffer overflows, or
 * the gateway drains) the gateway sends ConsumerPort.Detach{key} upstream,
 * logs the key, and closes: `tracectl attach URL KEY` collects the trace.
 * See docs/gateway.md, "Session survival".
 *
 * Lifetime: create after tg_gw_new (before clients connect), free after
 * tg_gw_free. Threading: the gateway's event loop thread. */
#ifndef TRACEGATE_GATEWAY_GW_RESUME_H
#define TRACEGATE_GATEWAY_GW_RESUME_H

#include <stddef.h>
#include <stdint.h>

struct tg_gw;
struct tg_gw_resume;

#define TG_GW_RESUME_WINDOW_DEFAULT_MS 60000u
#define TG_GW_RESUME_MAX_BUFFER_DEFAULT ((size_t)64 << 20)
/* Forwarded bytes kept for re-sending on top of what still sits in the
 * gateway's output queue: what the kernels' socket buffers (Linux defaults:
 * up to 4 MiB to send, 6 MiB to receive) and the client's unread input can
 * hold. Frames lost beyond it are reported (ResumeResponse.incomplete). */
#define TG_GW_RESUME_INFLIGHT_DEFAULT ((size_t)16 << 20)
/* Every session's buffered and kept bytes together (see max_total). */
#define TG_GW_RESUME_MAX_TOTAL_DEFAULT ((size_t)1 << 30)
#define TG_GW_RESUME_DETACH_TIMEOUT_DEFAULT_MS 10000u

struct tg_gw_resume_opts {
    uint32_t window_ms; /* how long a dropped client's session is kept (> 0) */
    size_t max_buffer;  /* bytes buffered while detached; over it: Detach at once (0 = default) */
    size_t inflight;    /* see TG_GW_RESUME_INFLIGHT_DEFAULT (0 = default) */
    /* Bytes held for all sessions together, buffered while detached and kept for re-sending (0 =
     * TG_GW_RESUME_MAX_TOTAL_DEFAULT). max_buffer and inflight bound one session; without this,
     * N connections that took a token would hold N times inflight. Over it, frames kept for
     * re-sending go first (a resume of their session then reports `incomplete`); a detached
     * session that receives a frame while what absent clients wait for alone is over it is
     * Detached at once (its trace survives under its key). */
    size_t max_total;
    /* How long the upstream may take to answer the Detach sent when the window ends before the
     * session is closed anyway (0 = TG_GW_RESUME_DETACH_TIMEOUT_DEFAULT_MS): a routed upstream (a
     * linked node) that never answers must not hold the session, its connection slot and its
     * place among its principal's kept sessions for good. */
    uint32_t detach_timeout_ms;
    /* Kept sessions per principal (0 = default 4). A drop beyond it is not
     * kept for a resume: the session is Detached upstream at once (its key
     * logged), so the trace survives but holds no gateway connection. Kept
     * sessions also hold their client's connection slot (gw_bridge.c), so
     * they count against --max-connections and the per-source limits. */
    uint32_t max_kept_per_principal;
};
#define TG_GW_RESUME_MAX_KEPT_DEFAULT 4u

/* Registers the local service and the filter on gw. Returns NULL with a
 * message in err on failure (window_ms 0, registration full, no memory). */
struct tg_gw_resume *tg_gw_resume_new(struct tg_gw *gw, const struct tg_gw_resume_opts *opts, char *err,
                                      size_t errlen);
/* Call after tg_gw_free (the filter's per-session state refers to it). NULL is fine. */
void tg_gw_resume_free(struct tg_gw_resume *r);

/* Sessions currently detached (waiting for a resume) and resumes completed. */
size_t tg_gw_resume_detached_count(const struct tg_gw_resume *r);
/* Bytes held for resumes, all sessions together (bounded by max_total). */
size_t tg_gw_resume_held_bytes(const struct tg_gw_resume *r);
uint64_t tg_gw_resume_resumed_total(const struct tg_gw_resume *r);

#endif
