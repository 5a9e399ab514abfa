/* fuzz_smb_bridge.c: libFuzzer target for the gateway's remote-producer SMB bridge
 * (gateway/gw_smb_bridge.c): a hostile producer's CommitData against an SMB in any state, and the
 * service's replies it rewrites or takes the SMB from.
 *
 * Input: byte 0 = geometry (bits 0..1: page size 4, 8, 16 or 64 KiB; bits 2..5: 1..16 pages);
 * byte 1 = mode (bit 0: the rest is a service reply, else a CommitData from the producer; bit 1:
 * busy pages are split in two chunks, the first Complete, instead of one Complete chunk; bit 2:
 * the reply answers InitializeConnection, else GetAsyncCommand with an SMB fd; bit 3: that fd's
 * size is not a whole number of pages); bytes 2..3 = which pages are busy (LE bit mask); the rest
 * is the request (or reply) payload.
 *
 * Oracle (no crash, no sanitizer report, no leak, and): a CommitData that is refused (ERROR),
 * retried (RETRY) or forwarded leaves every chunk state of the SMB as it was; one that is
 * rewritten names every chunk it took exactly once, each of them was Free and is now Complete
 * with the producer's header and bytes (zero after them), no other chunk changed, the entries
 * stay in order with their target buffers, chunk_incomplete chunks stay inline padded to the SMB's
 * chunk size, and the request id, method, flush ack and patches are kept. */
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "fuzz_check.h"
#include "gw_smb_bridge.h"
#include "producer_port.pb-c.h"
#include "smb/smb_abi.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PAGES 16u
#define RID 77u
#define SID 1u
#define MID 4u

static const size_t k_page_sizes[4] = {4096, 8192, 16384, 65536};

/* Verdicts seen (TG_FUZZ_VERBOSE=1 prints them at exit): shows the inputs reach every path. */
static unsigned long g_verdicts[4], g_copied, g_replies;

static void report(void)
{
    fprintf(stderr, "commits: %lu refused, %lu forwarded, %lu rewritten (%lu chunks copied), %lu retried; "
                    "%lu replies\n",
            g_verdicts[0], g_verdicts[1], g_verdicts[2], g_copied, g_verdicts[3], g_replies);
}

static int smb_fd(size_t bytes)
{
    int fd = memfd_create("fuzz_smb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        abort();
    return fd;
}

/* Offers a reply frame for `method` carrying payload. */
static enum tg_smbb_verdict offer_reply(struct tg_smb_bridge *b, const char *method, const uint8_t *payload,
                                        size_t n, int fd, uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    size_t need = tg_ipc_encode_reply(NULL, 0, RID, 1, 0, payload, n);
    uint8_t *frame = malloc(need);
    CHECK(frame);
    CHECK(tg_ipc_encode_reply(frame, need, RID, 1, 0, payload, n) == need);
    struct tg_frame_info fi;
    CHECK(tg_frame_scan(frame, need, &fi) == 0);
    enum tg_smbb_verdict v = tg_smb_bridge_from_service(b, method, &fi, fd, out, out_len, err, errlen);
    free(frame);
    return v;
}

/* The service's SMB, handed to the bridge with SetupTracing. */
static void setup_tracing(struct tg_smb_bridge *b, int fd, size_t page_size)
{
    Perfetto__Protos__GetAsyncCommandResponse cmd = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupTracing st =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_TRACING__INIT;
    st.has_shared_buffer_page_size_kb = 1;
    st.shared_buffer_page_size_kb = (uint32_t)(page_size / 1024);
    cmd.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    cmd.setup_tracing = &st;
    uint8_t payload[64];
    size_t n = perfetto__protos__get_async_command_response__pack(&cmd, payload);
    uint8_t *out = NULL;
    size_t out_len = 0;
    char err[256];
    CHECK(offer_reply(b, "GetAsyncCommand", payload, n, dup(fd), &out, &out_len, err, sizeof err) ==
          TG_SMBB_FORWARD);
    CHECK(tg_smb_bridge_has_smb(b));
}

static void fuzz_reply(const uint8_t *p, size_t n, unsigned mode, size_t page_size, size_t pages)
{
    struct tg_smb_bridge *b = tg_smb_bridge_new();
    CHECK(b);
    uint8_t *out = NULL;
    size_t out_len = 0;
    char err[256] = "";
    g_replies++;
    if (mode & 4) {
        enum tg_smbb_verdict v = offer_reply(b, "InitializeConnection", p, n, -1, &out, &out_len, err, sizeof err);
        CHECK(v == TG_SMBB_REPLACED || v == TG_SMBB_ERROR);
        if (v == TG_SMBB_REPLACED) { /* emulation offered, the rest kept */
            struct tg_frame_info fo;
            CHECK(tg_frame_scan(out, out_len, &fo) == 0 && fo.request_id == RID);
            Perfetto__Protos__InitializeConnectionResponse *r =
                perfetto__protos__initialize_connection_response__unpack(NULL, fo.payload_len, fo.payload);
            CHECK(r && r->has_use_shmem_emulation && r->use_shmem_emulation);
            CHECK(r->has_using_shmem_provided_by_producer && !r->using_shmem_provided_by_producer);
            perfetto__protos__initialize_connection_response__free_unpacked(r, NULL);
            free(out);
        } else {
            CHECK(err[0]);
        }
    } else {
        size_t bytes = pages * page_size + ((mode & 8) ? 100 : 0);
        enum tg_smbb_verdict v =
            offer_reply(b, "GetAsyncCommand", p, n, smb_fd(bytes), &out, &out_len, err, sizeof err);
        CHECK(v == TG_SMBB_FORWARD || v == TG_SMBB_ERROR);
        CHECK(!(v == TG_SMBB_ERROR) || err[0]);
        CHECK(!tg_smb_bridge_has_smb(b) || v == TG_SMBB_FORWARD);
    }
    tg_smb_bridge_free(b);
}

/* Chunk states of every page: the layout counts only while a chunk is taken (a page whose last
 * chunk is freed again is de-partitioned, which changes nothing a writer or reader sees). */
static void snapshot(const struct tg_smb *smb, uint32_t *words)
{
    for (size_t i = 0; i < smb->num_pages; i++) {
        uint32_t w = tg_smb_page_header(smb, i);
        words[i] = (w & TG_SMB_CHUNK_STATES_MASK) ? w : 0;
    }
}

static void fuzz_commit(const uint8_t *p, size_t n, unsigned mode, unsigned busy, size_t page_size, size_t pages)
{
    int fd = smb_fd(pages * page_size);
    uint8_t *map = mmap(NULL, pages * page_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(map != MAP_FAILED);
    struct tg_smb smb;
    CHECK(tg_smb_init(&smb, map, pages * page_size, page_size) == TG_SMB_OK);
    struct tg_smb_bridge *b = tg_smb_bridge_new();
    CHECK(b);
    setup_tracing(b, fd, page_size);
    for (size_t i = 0; i < pages; i++) { /* the service has not read these yet */
        if (!(busy & (1u << i)))
            continue;
        uint32_t w = (mode & 2) ? (uint32_t)TG_SMB_LAYOUT_DIV2 << TG_SMB_LAYOUT_SHIFT | TG_SMB_CHUNK_COMPLETE
                                : (uint32_t)TG_SMB_LAYOUT_DIV1 << TG_SMB_LAYOUT_SHIFT | TG_SMB_CHUNK_COMPLETE;
        memcpy(map + i * page_size, &w, sizeof w);
    }
    uint32_t before[MAX_PAGES], after[MAX_PAGES];
    snapshot(&smb, before);

    size_t need = tg_ipc_encode_invoke(NULL, 0, RID, SID, MID, p, n, 1);
    uint8_t *frame = malloc(need);
    CHECK(frame && tg_ipc_encode_invoke(frame, need, RID, SID, MID, p, n, 1) == need);
    struct tg_frame_info fi;
    CHECK(tg_frame_scan(frame, need, &fi) == 0);
    uint8_t *out = NULL;
    size_t out_len = 0;
    char err[256] = "";
    struct tg_smb_bridge_stats st0, st1;
    tg_smb_bridge_get_stats(b, &st0);
    enum tg_smbb_verdict v = tg_smb_bridge_from_producer(b, "CommitData", &fi, &out, &out_len, err, sizeof err);
    tg_smb_bridge_get_stats(b, &st1);
    snapshot(&smb, after);
    g_verdicts[v + 1]++;
    g_copied += st1.chunks_copied - st0.chunks_copied;
    Perfetto__Protos__CommitDataRequest *in = perfetto__protos__commit_data_request__unpack(NULL, n, p);
    size_t n_copy = 0, n_incomplete = 0;
    for (size_t i = 0; in && i < in->n_chunks_to_move; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunksToMove *m = in->chunks_to_move[i];
        n_copy += m->has_data && m->has_target_buffer && !(m->has_chunk_incomplete && m->chunk_incomplete);
        n_incomplete += m->has_data && m->has_target_buffer && m->has_chunk_incomplete && m->chunk_incomplete;
    }

    if (v != TG_SMBB_REPLACED) {
        CHECK(memcmp(before, after, pages * sizeof *before) == 0);
        CHECK(st1.chunks_copied == st0.chunks_copied);
        CHECK(v != TG_SMBB_ERROR || err[0]);
        /* retried for room, or to be split: padded, it would not fit one frame */
        CHECK(v != TG_SMBB_RETRY || n_copy > 0 || n_incomplete > 1);
        CHECK(v != TG_SMBB_FORWARD || in);
    } else {
        CHECK(in);
        struct tg_frame_info fo;
        CHECK(tg_frame_scan(out, out_len, &fo) == 0);
        /* padding never makes a frame larger than a service takes (unless the input already was) */
        CHECK(!n_incomplete || out_len <= TG_FRAME_MAX_DEFAULT || out_len <= need);
        CHECK(fo.msg == TG_MSG_INVOKE_METHOD && fo.request_id == RID && fo.service_id == SID &&
              fo.method_id == MID && fo.drop_reply);
        Perfetto__Protos__CommitDataRequest *r =
            perfetto__protos__commit_data_request__unpack(NULL, fo.payload_len, fo.payload);
        CHECK(r && r->n_chunks_to_move == in->n_chunks_to_move && r->n_chunks_to_patch == in->n_chunks_to_patch);
        CHECK(r->has_flush_request_id == in->has_flush_request_id && r->flush_request_id == in->flush_request_id);
        CHECK(st1.chunks_copied - st0.chunks_copied == n_copy);
        const size_t div1 = tg_smb_chunk_size(page_size, TG_SMB_LAYOUT_DIV1);
        unsigned named[MAX_PAGES] = {0}; /* bit per chunk */
        for (size_t i = 0; i < in->n_chunks_to_move; i++) {
            const Perfetto__Protos__CommitDataRequest__ChunksToMove *m = in->chunks_to_move[i];
            const Perfetto__Protos__CommitDataRequest__ChunksToMove *o = r->chunks_to_move[i];
            CHECK(o->has_target_buffer == m->has_target_buffer && o->target_buffer == m->target_buffer);
            if (!m->has_data || !m->has_target_buffer) { /* left as it came */
                CHECK(o->has_data == m->has_data && o->data.len == m->data.len);
                CHECK(!m->data.len || memcmp(o->data.data, m->data.data, m->data.len) == 0);
                continue;
            }
            if (m->has_chunk_incomplete && m->chunk_incomplete) { /* stays inline, padded */
                CHECK(o->has_data && o->chunk_incomplete && o->has_page && o->page == 0);
                CHECK(m->data.len <= div1 && o->data.len == div1);
                CHECK(memcmp(o->data.data, m->data.data, m->data.len) == 0);
                for (size_t k = m->data.len; k < o->data.len; k++)
                    CHECK(o->data.data[k] == 0);
                continue;
            }
            /* copied: names a chunk that was Free and is now Complete with the producer's bytes */
            CHECK(!o->has_data && !o->has_chunk_incomplete && o->has_page && o->has_chunk);
            CHECK(o->page < pages && o->chunk < TG_SMB_MAX_CHUNKS_PER_PAGE);
            CHECK(!(named[o->page] & (1u << o->chunk)));
            named[o->page] |= 1u << o->chunk;
            CHECK(tg_smb_word_chunk_state(before[o->page], o->chunk) == TG_SMB_CHUNK_FREE);
            uint32_t w = tg_smb_page_header(&smb, o->page);
            CHECK(tg_smb_word_chunk_state(w, o->chunk) == TG_SMB_CHUNK_COMPLETE);
            size_t csize = 0;
            const uint8_t *c = tg_smb_chunk_ptr(&smb, o->page, tg_smb_word_layout(w), o->chunk, &csize);
            CHECK(c && m->data.len <= csize);
            CHECK(memcmp(c, m->data.data, m->data.len) == 0);
            for (size_t k = m->data.len; k < csize; k++)
                CHECK(c[k] == 0);
        }
        /* nothing else changed: no chunk taken without being named */
        for (size_t pg = 0; pg < pages; pg++) {
            for (unsigned k = 0; k < TG_SMB_MAX_CHUNKS_PER_PAGE; k++) {
                if (named[pg] & (1u << k))
                    continue;
                CHECK(tg_smb_word_chunk_state(after[pg], k) == tg_smb_word_chunk_state(before[pg], k));
            }
        }
        perfetto__protos__commit_data_request__free_unpacked(r, NULL);
        free(out);
    }
    if (in)
        perfetto__protos__commit_data_request__free_unpacked(in, NULL);
    free(frame);
    tg_smb_bridge_free(b);
    munmap(map, pages * page_size);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        if (getenv("TG_FUZZ_VERBOSE"))
            atexit(report);
    }
    if (size < 4)
        return 0;
    size_t page_size = k_page_sizes[data[0] & 3];
    size_t pages = 1 + ((data[0] >> 2) & 15);
    unsigned mode = data[1];
    unsigned busy = (unsigned)data[2] | (unsigned)data[3] << 8;
    if (mode & 1)
        fuzz_reply(data + 4, size - 4, mode, page_size, pages);
    else
        fuzz_commit(data + 4, size - 4, mode, busy, page_size, pages);
    return 0;
}
