/* test_gw_smb_bridge.c: the remote-producer SMB bridge: emulation offered, inline chunks copied into the real
 * SMB and CommitData renamed, all-or-nothing retry when full, incomplete chunks kept inline, bad input refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "gw_smb_bridge.h"
#include "producer_port.pb-c.h"
#include "smb/smb_abi.h"
#include "smb/smb_writer.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

#define SMB_SIZE (16 * 4096)

struct fixture {
    struct tg_smb_bridge *b;
    int fd;          /* the "service's" SMB */
    uint8_t *map;
    struct tg_smb smb;
};

static size_t reply_frame(uint8_t *buf, size_t cap, uint64_t rid, int has_more, const ProtobufCMessage *m)
{
    uint8_t payload[512];
    size_t n = protobuf_c_message_pack(m, payload);
    return tg_ipc_encode_reply(buf, cap, rid, 1, has_more, payload, n);
}

/* The service's SetupTracing (4 KiB pages) handing the bridge a copy of fd, as it arrives on the
 * GetAsyncCommand stream; the bridge's verdict (err says why on TG_SMBB_ERROR). */
static enum tg_smbb_verdict offer_smb(struct tg_smb_bridge *b, int fd, char *err, size_t errlen)
{
    Perfetto__Protos__GetAsyncCommandResponse cmd = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupTracing st =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_TRACING__INIT;
    st.has_shared_buffer_page_size_kb = 1;
    st.shared_buffer_page_size_kb = 4;
    cmd.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    cmd.setup_tracing = &st;
    uint8_t frame[1024];
    size_t n = reply_frame(frame, sizeof frame, 3, 1, &cmd.base);
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan(frame, n, &fi), 0);
    uint8_t *out = NULL;
    size_t out_len = 0;
    err[0] = '\0';
    return tg_smb_bridge_from_service(b, "GetAsyncCommand", &fi, dup(fd), &out, &out_len, err, errlen);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    f->b = tg_smb_bridge_new();
    f->fd = memfd_create("test_smb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_int_equal(ftruncate(f->fd, SMB_SIZE), 0);
    assert_int_equal(fcntl(f->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    f->map = mmap(NULL, SMB_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
    assert_int_equal(tg_smb_init(&f->smb, f->map, SMB_SIZE, 4096), TG_SMB_OK);

    char err[160];
    assert_int_equal(offer_smb(f->b, f->fd, err, sizeof err), TG_SMBB_FORWARD);
    assert_true(tg_smb_bridge_has_smb(f->b));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    tg_smb_bridge_free(f->b);
    munmap(f->map, SMB_SIZE);
    close(f->fd);
    free(f);
    return 0;
}

/* An upstream handing out an SMB it can still shrink could make the gateway's next copy into the
 * mapping SIGBUS, and that would take down every client: the bridge refuses it. */
static void test_unsealed_service_smb_refused(void **state)
{
    (void)state;
    struct tg_smb_bridge *b = tg_smb_bridge_new();
    int fd = memfd_create("test_smb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, SMB_SIZE), 0);
    char err[160];
    assert_int_equal(offer_smb(b, fd, err, sizeof err), TG_SMBB_ERROR);
    assert_non_null(strstr(err, "not sealed"));
    assert_false(tg_smb_bridge_has_smb(b));
    /* sealed, the same file is taken */
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    assert_int_equal(offer_smb(b, fd, err, sizeof err), TG_SMBB_FORWARD);
    assert_true(tg_smb_bridge_has_smb(b));
    tg_smb_bridge_free(b);
    close(fd);
}

static void test_init_reply_offers_emulation(void **state)
{
    struct fixture *f = *state;
    Perfetto__Protos__InitializeConnectionResponse r = PERFETTO__PROTOS__INITIALIZE_CONNECTION_RESPONSE__INIT;
    r.has_direct_smb_patching_supported = 1;
    r.direct_smb_patching_supported = 1;
    r.has_use_shmem_emulation = 1; /* a UNIX upstream says false */
    uint8_t frame[256];
    size_t n = reply_frame(frame, sizeof frame, 2, 0, &r.base);
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan(frame, n, &fi), 0);
    uint8_t *out = NULL;
    size_t out_len;
    char err[128];
    assert_int_equal(tg_smb_bridge_from_service(f->b, "InitializeConnection", &fi, -1, &out, &out_len, err, sizeof err),
                     TG_SMBB_REPLACED);
    struct tg_frame_info fo;
    assert_int_equal(tg_frame_scan(out, out_len, &fo), 0);
    assert_int_equal(fo.request_id, 2);
    assert_true(fo.success);
    Perfetto__Protos__InitializeConnectionResponse *d =
        perfetto__protos__initialize_connection_response__unpack(NULL, fo.payload_len, fo.payload);
    assert_non_null(d);
    assert_true(d->use_shmem_emulation);
    assert_true(d->direct_smb_patching_supported);
    perfetto__protos__initialize_connection_response__free_unpacked(d, NULL);
    free(out);
}

/* Builds emulated chunks with the real writer into a private buffer. */
struct captured {
    uint8_t data[8][4096];
    size_t len[8];
    unsigned n;
};

static void capture(void *ctx, const struct tg_smb_commit *c)
{
    struct captured *cap = ctx;
    if (cap->n < 8) {
        memcpy(cap->data[cap->n], c->chunk_data, c->chunk_size);
        cap->len[cap->n++] = c->chunk_size;
    }
}

static size_t commit_frame(uint8_t *buf, size_t cap_len, struct captured *cap, unsigned first, unsigned count,
                           int incomplete_last)
{
    Perfetto__Protos__CommitDataRequest req = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv[8], *mvp[8];
    for (unsigned i = 0; i < count; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove init = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
        mv[i] = init;
        mv[i].has_page = mv[i].has_chunk = mv[i].has_target_buffer = 1;
        mv[i].page = first + i;
        mv[i].target_buffer = 7;
        mv[i].has_data = 1;
        mv[i].data.data = cap->data[first + i];
        mv[i].data.len = cap->len[first + i];
        if (incomplete_last && i == count - 1) {
            mv[i].has_chunk_incomplete = 1;
            mv[i].chunk_incomplete = 1;
        }
        mvp[i] = &mv[i];
    }
    req.n_chunks_to_move = count;
    req.chunks_to_move = mvp;
    req.has_flush_request_id = 1;
    req.flush_request_id = 42;
    static uint8_t args[40000];
    size_t n = perfetto__protos__commit_data_request__pack(&req, args);
    return tg_ipc_encode_invoke(buf, cap_len, 9, 1, 4, args, n, 1);
}

/* Chunks the real writer makes in a private buffer of 4 KiB pages partitioned with layout (0: the
 * writer's default), from `packets` packets of pkt_len bytes, flushed after each one (flush_each)
 * or once at the end. */
static void make_chunks_with(struct captured *cap, unsigned layout, size_t pkt_len, unsigned packets, int flush_each)
{
    static uint8_t priv[8 * 4096];
    memset(priv, 0, sizeof priv);
    memset(cap, 0, sizeof *cap);
    struct tg_smb psmb;
    assert_int_equal(tg_smb_init(&psmb, priv, sizeof priv, 4096), TG_SMB_OK);
    struct tg_smb_writer w;
    struct tg_smb_writer_config cfg = {.smb = &psmb, .writer_id = 3, .target_buffer = 7, .emulation = true,
                                       .layout = layout, .commit = capture, .commit_ctx = cap};
    assert_int_equal(tg_smb_writer_init(&w, &cfg), TG_SMB_WRITER_OK);
    uint8_t pkt[1000];
    assert_true(pkt_len <= sizeof pkt);
    memset(pkt, 'x', pkt_len);
    for (unsigned i = 0; i < packets; i++) {
        tg_smb_writer_write_packet(&w, pkt, pkt_len);
        if (flush_each)
            tg_smb_writer_flush(&w);
    }
    if (!flush_each)
        tg_smb_writer_flush(&w);
}

static void make_chunks(struct captured *cap, unsigned packets_per_chunk_hint)
{
    make_chunks_with(cap, 0, 1000, packets_per_chunk_hint, 0);
}

/* Offers chunks first..first+count of cap as one CommitData (the last one marked incomplete when
 * incomplete_last) and expects the bridge to rewrite it. Returns the rewritten request (the caller
 * frees it); *fo gets the rewritten frame's header fields (its payload pointer is not kept). */
static Perfetto__Protos__CommitDataRequest *rewritten(struct fixture *f, struct captured *cap, unsigned first,
                                                      unsigned count, int incomplete_last, struct tg_frame_info *fo)
{
    static uint8_t frame[60000];
    size_t n = commit_frame(frame, sizeof frame, cap, first, count, incomplete_last);
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan(frame, n, &fi), 0);
    uint8_t *out = NULL;
    size_t out_len;
    char err[128];
    assert_int_equal(tg_smb_bridge_from_producer(f->b, "CommitData", &fi, &out, &out_len, err, sizeof err),
                     TG_SMBB_REPLACED);
    assert_int_equal(tg_frame_scan(out, out_len, fo), 0);
    Perfetto__Protos__CommitDataRequest *r =
        perfetto__protos__commit_data_request__unpack(NULL, fo->payload_len, fo->payload);
    assert_non_null(r);
    free(out);
    fo->payload = NULL;
    return r;
}

static void test_commit_is_copied_and_renamed(void **state)
{
    struct fixture *f = *state;
    struct captured cap;
    make_chunks(&cap, 9); /* ~9000 bytes: 3 chunks of 4 KiB */
    assert_true(cap.n >= 3);
    struct tg_frame_info fo;
    Perfetto__Protos__CommitDataRequest *r = rewritten(f, &cap, 0, cap.n, 0, &fo);
    assert_int_equal(fo.request_id, 9);
    assert_int_equal(fo.method_id, 4);
    assert_true(fo.drop_reply);
    assert_int_equal(r->n_chunks_to_move, cap.n);
    assert_int_equal(r->flush_request_id, 42);
    for (size_t i = 0; i < r->n_chunks_to_move; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove *m = r->chunks_to_move[i];
        assert_false(m->has_data);
        assert_int_equal(m->target_buffer, 7);
        /* the named chunk is Complete and holds exactly the producer's bytes */
        uint32_t word = tg_smb_page_header(&f->smb, m->page);
        assert_int_equal(tg_smb_word_chunk_state(word, m->chunk), TG_SMB_CHUNK_COMPLETE);
        size_t csz;
        uint8_t *p = tg_smb_chunk_ptr(&f->smb, m->page, tg_smb_word_layout(word), m->chunk, &csz);
        assert_non_null(p);
        assert_memory_equal(p, cap.data[i], cap.len[i]);
    }
    perfetto__protos__commit_data_request__free_unpacked(r, NULL);
    struct tg_smb_bridge_stats st;
    tg_smb_bridge_get_stats(f->b, &st);
    assert_int_equal(st.chunks_copied, cap.n);
}

/* Small chunks from a remote producer share a page (the smallest layout that holds them) instead of
 * taking a whole page each: the SMB holds more of them, and neither the gateway nor the service
 * copies a page per chunk of a few hundred bytes. A chunk too big for those stays whole. */
static void test_small_chunks_share_a_page(void **state)
{
    struct fixture *f = *state;
    struct captured cap;
    make_chunks_with(&cap, TG_SMB_LAYOUT_DIV14, 100, 8, 1);
    assert_int_equal(cap.n, 8);
    assert_int_equal(cap.len[0], tg_smb_chunk_size(4096, TG_SMB_LAYOUT_DIV14));
    struct tg_frame_info fo;
    Perfetto__Protos__CommitDataRequest *r = rewritten(f, &cap, 0, cap.n, 0, &fo);
    assert_int_equal(r->n_chunks_to_move, 8);
    uint32_t page = r->chunks_to_move[0]->page;
    for (size_t i = 0; i < r->n_chunks_to_move; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove *m = r->chunks_to_move[i];
        assert_int_equal(m->page, page);
        uint32_t word = tg_smb_page_header(&f->smb, m->page);
        assert_int_equal(tg_smb_word_layout(word), TG_SMB_LAYOUT_DIV14);
        size_t csz;
        uint8_t *p = tg_smb_chunk_ptr(&f->smb, m->page, TG_SMB_LAYOUT_DIV14, m->chunk, &csz);
        assert_memory_equal(p, cap.data[i], cap.len[i]);
    }
    perfetto__protos__commit_data_request__free_unpacked(r, NULL);

    /* a whole-page chunk next is not squeezed into the small chunks left on that page */
    make_chunks(&cap, 5);
    r = rewritten(f, &cap, 0, 1, 0, &fo);
    assert_int_not_equal(r->chunks_to_move[0]->page, page);
    assert_int_equal(tg_smb_word_layout(tg_smb_page_header(&f->smb, r->chunks_to_move[0]->page)), TG_SMB_LAYOUT_DIV1);
    perfetto__protos__commit_data_request__free_unpacked(r, NULL);
}

static void test_full_smb_retries_without_copying(void **state)
{
    struct fixture *f = *state;
    /* occupy every chunk of the service's SMB */
    size_t cursor = 0, page;
    unsigned chunk;
    uint8_t *ptr;
    size_t size;
    struct tg_smb_chunk_header h = {.chunk_id = 1, .writer_id = 9, .packets = 0};
    int taken = 0;
    while (tg_smb_find_free_chunk(&f->smb, TG_SMB_LAYOUT_DIV1, &cursor, &h, &page, &chunk, &ptr, &size) == TG_SMB_OK)
        taken++;
    assert_int_equal(taken, SMB_SIZE / 4096);
    /* free exactly one: a 3-chunk commit must not be copied partially */
    tg_smb_release_chunk_as_complete(&f->smb, 0, 0);
    tg_smb_release_complete_chunk_as_free(&f->smb, 0, 0);
    struct captured cap;
    make_chunks(&cap, 9);
    static uint8_t frame[60000];
    size_t n = commit_frame(frame, sizeof frame, &cap, 0, 3, 0);
    struct tg_frame_info fi;
    tg_frame_scan(frame, n, &fi);
    uint8_t *out = NULL;
    size_t out_len;
    char err[128];
    assert_int_equal(tg_smb_bridge_from_producer(f->b, "CommitData", &fi, &out, &out_len, err, sizeof err),
                     TG_SMBB_RETRY);
    assert_null(out);
    /* the one free chunk is free again */
    assert_int_equal(tg_smb_word_chunk_state(tg_smb_page_header(&f->smb, 0), 0), TG_SMB_CHUNK_FREE);
}

/* An incomplete chunk (the producer scraped it while writing; it comes again complete later) is
 * not copied: a chunk named in the SMB is read as complete and could not grow. It stays inline,
 * padded to the SMB's chunk size, page 0, still marked incomplete; complete ones beside it are
 * copied as usual. */
static void test_incomplete_chunk_stays_inline(void **state)
{
    struct fixture *f = *state;
    struct captured cap;
    make_chunks(&cap, 9);
    assert_true(cap.n >= 2);
    cap.len[1] = 100; /* trimmed to what it holds so far: the bridge pads it */
    struct tg_frame_info fo;
    Perfetto__Protos__CommitDataRequest *r = rewritten(f, &cap, 0, 2, 1, &fo);
    assert_int_equal(r->n_chunks_to_move, 2);
    assert_false(r->chunks_to_move[0]->has_data); /* the complete one: copied and renamed */
    Perfetto__Protos__CommitDataRequest__ChunksToMove *m = r->chunks_to_move[1];
    assert_true(m->has_data && m->has_chunk_incomplete && m->chunk_incomplete);
    assert_int_equal(m->data.len, tg_smb_chunk_size(4096, TG_SMB_LAYOUT_DIV1));
    assert_memory_equal(m->data.data, cap.data[1], 100);
    for (size_t i = 100; i < m->data.len; i++)
        assert_int_equal(m->data.data[i], 0);
    assert_int_equal(m->page, 0);
    assert_int_equal(m->target_buffer, 7);
    /* exactly one SMB chunk was taken */
    unsigned busy = 0;
    for (size_t pg = 0; pg < f->smb.num_pages; pg++)
        busy += (tg_smb_page_header(&f->smb, pg) & TG_SMB_CHUNK_STATES_MASK) != 0;
    assert_int_equal(busy, 1);
    perfetto__protos__commit_data_request__free_unpacked(r, NULL);
    struct tg_smb_bridge_stats st;
    tg_smb_bridge_get_stats(f->b, &st);
    assert_int_equal(st.chunks_copied, 1);
}

/* Tiny incomplete chunks each grow to a whole SMB chunk when padded: 100 of them (16 bytes each on
 * the wire) would make a 400 KiB frame (with 64 KiB pages, 500 MB from one 128 KiB frame), over
 * what any service takes. The bridge asks for the request to be split instead (RETRY), taking
 * nothing from the SMB; one such chunk alone is padded as usual. */
static void test_tiny_incomplete_chunks_not_amplified(void **state)
{
    struct fixture *f = *state;
    enum { N = 100 };
    static uint8_t hdr[N][8];
    Perfetto__Protos__CommitDataRequest req = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv[N], *mvp[N];
    for (unsigned i = 0; i < N; i++) {
        struct tg_smb_chunk_header h = {.chunk_id = 0, .writer_id = (uint16_t)(i + 1)};
        tg_smb_chunk_header_encode(hdr[i], &h);
        Perfetto__Protos__CommitDataRequest__ChunksToMove init = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
        mv[i] = init;
        mv[i].has_target_buffer = 1;
        mv[i].target_buffer = 7;
        mv[i].has_data = 1;
        mv[i].data.data = hdr[i];
        mv[i].data.len = sizeof hdr[i];
        mv[i].has_chunk_incomplete = mv[i].chunk_incomplete = 1;
        mvp[i] = &mv[i];
    }
    req.chunks_to_move = mvp;
    static uint8_t args[8192], frame[8192];
    char err[160];
    for (size_t n = N; n >= 1; n = n == N ? 1 : 0) {
        req.n_chunks_to_move = n;
        size_t alen = perfetto__protos__commit_data_request__pack(&req, args);
        size_t flen = tg_ipc_encode_invoke(frame, sizeof frame, 9, 1, 4, args, alen, 1);
        struct tg_frame_info fi;
        assert_int_equal(tg_frame_scan(frame, flen, &fi), 0);
        uint8_t *out = NULL;
        size_t out_len = 0;
        enum tg_smbb_verdict v = tg_smb_bridge_from_producer(f->b, "CommitData", &fi, &out, &out_len, err, sizeof err);
        if (n == N) {
            assert_int_equal(v, TG_SMBB_RETRY);
            assert_null(out);
        } else {
            assert_int_equal(v, TG_SMBB_REPLACED);
            assert_true(out_len <= TG_FRAME_MAX_DEFAULT);
            free(out);
        }
    }
    for (size_t pg = 0; pg < f->smb.num_pages; pg++) /* nothing taken from the SMB */
        assert_int_equal(tg_smb_page_header(&f->smb, pg) & TG_SMB_CHUNK_STATES_MASK, 0);
}

static void test_bad_input_refused_and_others_forwarded(void **state)
{
    struct fixture *f = *state;
    uint8_t chunk[4] = {1, 2, 3, 4}; /* shorter than a chunk header */
    Perfetto__Protos__CommitDataRequest req = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove *mvp = &mv;
    mv.has_data = 1;
    mv.data.data = chunk;
    mv.data.len = sizeof chunk;
    req.n_chunks_to_move = 1;
    req.chunks_to_move = &mvp;
    uint8_t args[64], frame[128];
    size_t an = perfetto__protos__commit_data_request__pack(&req, args);
    size_t n = tg_ipc_encode_invoke(frame, sizeof frame, 5, 1, 4, args, an, 1);
    struct tg_frame_info fi;
    tg_frame_scan(frame, n, &fi);
    uint8_t *out = NULL;
    size_t out_len;
    char err[128] = "";
    assert_int_equal(tg_smb_bridge_from_producer(f->b, "CommitData", &fi, &out, &out_len, err, sizeof err),
                     TG_SMBB_ERROR);
    assert_true(strlen(err) > 0);
    /* garbage CommitData arguments */
    uint8_t junk[3] = {0xff, 0xff, 0xff};
    n = tg_ipc_encode_invoke(frame, sizeof frame, 6, 1, 4, junk, sizeof junk, 1);
    tg_frame_scan(frame, n, &fi);
    assert_int_equal(tg_smb_bridge_from_producer(f->b, "CommitData", &fi, &out, &out_len, err, sizeof err),
                     TG_SMBB_ERROR);
    /* other methods pass untouched */
    n = tg_ipc_encode_invoke(frame, sizeof frame, 7, 1, 6, (const uint8_t *)"\x08\x01\x10\x07", 4, 1);
    tg_frame_scan(frame, n, &fi);
    assert_int_equal(tg_smb_bridge_from_producer(f->b, "RegisterTraceWriter", &fi, &out, &out_len, err, sizeof err),
                     TG_SMBB_FORWARD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unsealed_service_smb_refused),
        cmocka_unit_test_setup_teardown(test_init_reply_offers_emulation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_is_copied_and_renamed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_chunks_share_a_page, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_smb_retries_without_copying, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incomplete_chunk_stays_inline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tiny_incomplete_chunks_not_amplified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_refused_and_others_forwarded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
