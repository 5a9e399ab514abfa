/* fuzz_commit_data.c: libFuzzer target for the service's CommitData handling
 * (src/service/commit.c) on a producer with an active session: arbitrary SMB
 * contents (the producer owns that memory and can write anything) plus an
 * arbitrary CommitDataRequest, then optionally a scrape of the SMB and a full
 * read-out of the session (reassembly, validation, trusted fields).
 *
 * Setup (once): an in-process tg_service, a producer connected through a
 * socketpair (InitializeConnection with a 16 KiB SMB and scraping on,
 * GetAsyncCommand, a data source, two registered trace writers) and a
 * consumer whose EnableTracing session targets that data source.
 *
 * Input: byte 0 = flags (bit 0: point every target_buffer at the session's
 * buffer; bit 1: scrape; bit 2: read everything out; bit 3: zero the SMB
 * first; bit 4: the rest is a script, see build_request), bytes 1..2 = n
 * (LE), then n bytes copied over the SMB at an offset chosen by byte 3, then
 * the serialized CommitDataRequest (or the script).
 * Oracle: no crash, no sanitizer report, no leak; the service stays usable. */
#include <event2/event.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/service.h"

#include "service/svc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct event_base *g_base;
static tg_service *g_svc;
static int g_pfd = -1, g_cfd = -1;
static tg_svc_producer *g_prod;
static uint32_t g_buffer;

static void drain(void)
{
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    uint8_t buf[65536];
    for (int i = 0; i < 64; i++) {
        ssize_t a = read(g_pfd, buf, sizeof buf);
        ssize_t b = read(g_cfd, buf, sizeof buf);
        if (a <= 0 && b <= 0)
            break;
    }
}

static void send_frame(int fd, const uint8_t *body, size_t len)
{
    uint8_t hdr[4];
    tg_frame_put_header(hdr, (uint32_t)len);
    /* small frames into an empty socket buffer: non-blocking writes complete */
    if (write(fd, hdr, 4) != 4 || write(fd, body, len) != (ssize_t)len)
        abort();
    event_base_loop(g_base, EVLOOP_NONBLOCK);
}

static void invoke(int fd, uint64_t rid, uint32_t mid, const ProtobufCMessage *m)
{
    uint8_t args[1024], frame[2048];
    size_t n = m ? protobuf_c_message_pack(m, args) : 0;
    size_t fl = tg_ipc_encode_invoke(frame, sizeof frame, rid, 1, mid, args, n, 0);
    send_frame(fd, frame, fl);
}

static void bind_service(int fd, const char *name)
{
    uint8_t frame[256];
    size_t n = tg_ipc_encode_bind(frame, sizeof frame, 1, name);
    send_frame(fd, frame, n);
}

static unsigned long g_decoded, g_moves, g_patches;

static void cleanup(void)
{
    if (getenv("TG_FUZZ_VERBOSE") && g_svc && g_svc->sessions) {
        const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(g_svc->sessions->buffers[0]->tb);
        fprintf(stderr, "decoded %lu requests (%lu moves, %lu patches); chunks written %llu, discarded %llu, "
                        "patches ok %llu, abi violations %llu, invalid packets %llu\n",
                g_decoded, g_moves, g_patches, (unsigned long long)st->chunks_written,
                (unsigned long long)g_svc->chunks_discarded, (unsigned long long)st->patches_succeeded,
                (unsigned long long)st->abi_violations, (unsigned long long)g_svc->invalid_packets);
    }
    if (g_pfd >= 0)
        close(g_pfd);
    if (g_cfd >= 0)
        close(g_cfd);
    if (g_svc)
        tg_service_free(g_svc);
    if (g_base)
        event_base_free(g_base);
}

static void setup(void)
{
    g_base = event_base_new();
    struct tg_service_opts o;
    memset(&o, 0, sizeof o);
    o.producer_socks = "";
    o.consumer_socks = "";
    char err[256];
    g_svc = tg_service_new(g_base, &o, err, sizeof err);
    if (!g_svc)
        abort();
    atexit(cleanup);
    g_pfd = tg_service_connect_local(g_svc, 1);
    g_cfd = tg_service_connect_local(g_svc, 0);
    if (g_pfd < 0 || g_cfd < 0)
        abort();
    /* never block: the service runs on this thread */
    fcntl(g_pfd, F_SETFL, fcntl(g_pfd, F_GETFL) | O_NONBLOCK);
    fcntl(g_cfd, F_SETFL, fcntl(g_cfd, F_GETFL) | O_NONBLOCK);
    bind_service(g_pfd, "ProducerPort");
    Perfetto__Protos__InitializeConnectionRequest ic = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)"fuzz";
    ic.has_smb_scraping_mode = 1;
    ic.smb_scraping_mode = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__PRODUCER_SMBSCRAPING_MODE__SMB_SCRAPING_ENABLED;
    ic.has_shared_memory_size_hint_bytes = ic.has_shared_memory_page_size_hint_bytes = 1;
    ic.shared_memory_size_hint_bytes = 16384;
    ic.shared_memory_page_size_hint_bytes = 4096;
    invoke(g_pfd, 2, 1, &ic.base);
    invoke(g_pfd, 3, 5, NULL);
    Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = (char *)"fuzz.ds";
    Perfetto__Protos__RegisterDataSourceRequest rd = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    rd.data_source_descriptor = &d;
    invoke(g_pfd, 4, 2, &rd.base);
    for (int i = 0; i < 50; i++)
        drain();

    bind_service(g_cfd, "ConsumerPort");
    Perfetto__Protos__TraceConfig__BufferConfig bc = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig *bcp = &bc;
    bc.has_size_kb = 1;
    bc.size_kb = 64;
    Perfetto__Protos__DataSourceConfig dc = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    dc.name = (char *)"fuzz.ds";
    Perfetto__Protos__TraceConfig__DataSource ds = PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT;
    Perfetto__Protos__TraceConfig__DataSource *dsp = &ds;
    ds.config = &dc;
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    tc.n_buffers = 1;
    tc.buffers = &bcp;
    tc.n_data_sources = 1;
    tc.data_sources = &dsp;
    Perfetto__Protos__EnableTracingRequest en = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    en.trace_config = &tc;
    invoke(g_cfd, 2, 1, &en.base);
    for (int i = 0; i < 50; i++)
        drain();
    g_prod = g_svc->producers;
    if (!g_prod || !g_prod->initialized || !tg_smb_host_valid(&g_prod->smb) || !g_svc->sessions)
        abort();
    g_buffer = g_svc->sessions->buffers[0]->id;
    for (uint32_t w = 1; w <= 2; w++) {
        Perfetto__Protos__RegisterTraceWriterRequest rw = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
        rw.has_trace_writer_id = rw.has_target_buffer = 1;
        rw.trace_writer_id = w;
        rw.target_buffer = g_buffer;
        invoke(g_pfd, 10 + w, 6, &rw.base);
    }
    for (int i = 0; i < 50; i++)
        drain();
}

/* Structured mode (flag 16): the bytes are a script that writes plausible
 * chunks into the SMB (valid page headers, chunk headers, fragments) and
 * builds the CommitDataRequest, so random inputs reach deep into reassembly.
 * Records: 'W' page writer chunk_id count flags len payload[len] -> a chunk
 * written and marked Complete (or BeingWritten when flags & 0x80) and, unless
 * flags & 0x40, named in chunks_to_move; 'I' writer chunk_id count flags len
 * payload[len] -> an inline (emulation-style) chunk; 'P' writer chunk_id
 * offset b0 b1 b2 b3 more -> a patch. Unknown bytes are skipped. */
static Perfetto__Protos__CommitDataRequest *build_request(struct tg_smb *smb, const uint8_t *p, size_t n)
{
    Perfetto__Protos__CommitDataRequest *req = calloc(1, sizeof *req);
    perfetto__protos__commit_data_request__init(req);
    size_t i = 0;
    while (i < n && req->n_chunks_to_move < 32 && req->n_chunks_to_patch < 32) {
        uint8_t op = p[i++];
        if ((op == 'W' || op == 'I') && i + 5 + (op == 'W') <= n) {
            size_t page = op == 'W' ? p[i++] % smb->num_pages : 0;
            uint16_t writer = (uint16_t)(p[i] == 255 ? 0 : 1 + p[i] % 3);
            uint32_t chunk_id = p[i + 1];
            unsigned count = p[i + 2] % 16, fl = p[i + 3];
            size_t len = p[i + 4];
            i += 5;
            if (len > n - i)
                len = n - i;
            const uint8_t *payload = p + i;
            i += len;
            uint8_t chunk[4096];
            memset(chunk, 0, sizeof chunk);
            struct tg_smb_chunk_header h = {chunk_id, writer, tg_smb_make_packets(count, fl & 7)};
            tg_smb_chunk_header_encode(chunk, &h);
            memcpy(chunk + 8, payload, len);
            size_t csize = tg_smb_chunk_size(smb->page_size, TG_SMB_LAYOUT_DIV1);
            Perfetto__Protos__CommitDataRequest__ChunksToMove *m = calloc(1, sizeof *m);
            perfetto__protos__commit_data_request__chunks_to_move__init(m);
            m->has_target_buffer = m->has_page = m->has_chunk = 1;
            m->target_buffer = g_buffer;
            m->page = (uint32_t)page;
            if (op == 'W') {
                uint8_t *base = smb->base + page * smb->page_size;
                uint32_t word = (TG_SMB_LAYOUT_DIV1 << TG_SMB_LAYOUT_SHIFT) |
                                ((fl & 0x80) ? TG_SMB_CHUNK_BEING_WRITTEN : TG_SMB_CHUNK_COMPLETE);
                memcpy(base, &word, 4);
                memcpy(base + 8, chunk, csize < sizeof chunk ? csize : sizeof chunk);
                if (fl & 0x40) {
                    free(m);
                    continue;
                }
            } else {
                m->has_data = 1;
                m->data.len = csize;
                m->data.data = malloc(csize);
                memcpy(m->data.data, chunk, csize);
                m->has_chunk_incomplete = 1;
                m->chunk_incomplete = (fl & 0x80) != 0;
            }
            req->chunks_to_move = realloc(req->chunks_to_move, (req->n_chunks_to_move + 1) * sizeof(void *));
            req->chunks_to_move[req->n_chunks_to_move++] = m;
        } else if (op == 'P' && i + 8 <= n) {
            Perfetto__Protos__CommitDataRequest__ChunkToPatch *cp = calloc(1, sizeof *cp);
            perfetto__protos__commit_data_request__chunk_to_patch__init(cp);
            cp->has_target_buffer = cp->has_writer_id = cp->has_chunk_id = cp->has_has_more_patches = 1;
            cp->target_buffer = g_buffer;
            cp->writer_id = p[i] % 4;
            cp->chunk_id = p[i + 1] % 8;
            cp->has_more_patches = p[i + 7] & 1;
            Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch *pt = calloc(1, sizeof *pt);
            perfetto__protos__commit_data_request__chunk_to_patch__patch__init(pt);
            pt->has_offset = pt->has_data = 1;
            pt->offset = p[i + 2] * 16u;
            pt->data.len = 4;
            pt->data.data = malloc(4);
            memcpy(pt->data.data, p + i + 3, 4);
            cp->n_patches = 1;
            cp->patches = malloc(sizeof(void *));
            cp->patches[0] = pt;
            i += 8;
            req->chunks_to_patch = realloc(req->chunks_to_patch, (req->n_chunks_to_patch + 1) * sizeof(void *));
            req->chunks_to_patch[req->n_chunks_to_patch++] = cp;
        }
    }
    return req;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_svc)
        setup();
    if (size < 4)
        return 0;
    uint8_t flags = data[0];
    size_t n = (size_t)data[1] | (size_t)data[2] << 8;
    size_t off_sel = data[3];
    data += 4;
    size -= 4;
    if (n > size)
        n = size;
    struct tg_smb *smb = &g_prod->smb.smb;
    if (flags & 8)
        memset(smb->base, 0, smb->size);
    if (n) {
        size_t off = (off_sel * 64u) % smb->size;
        size_t room = smb->size - off;
        memcpy(smb->base + off, data, n < room ? n : room);
    }
    data += n;
    size -= n;
    Perfetto__Protos__CommitDataRequest *req = (flags & 16) ? build_request(smb, data, size)
                                                            : perfetto__protos__commit_data_request__unpack(NULL, size, data);
    if (req) {
        if (flags & 1) {
            for (size_t i = 0; i < req->n_chunks_to_move; i++) {
                req->chunks_to_move[i]->has_target_buffer = 1;
                req->chunks_to_move[i]->target_buffer = g_buffer;
            }
            for (size_t i = 0; i < req->n_chunks_to_patch; i++) {
                req->chunks_to_patch[i]->has_target_buffer = 1;
                req->chunks_to_patch[i]->target_buffer = g_buffer;
            }
        }
        g_decoded++;
        g_moves += req->n_chunks_to_move;
        g_patches += req->n_chunks_to_patch;
        tg_svc_commit_data(g_prod, req);
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
    }
    if (flags & 2)
        tg_svc_scrape_producer(g_prod, NULL);
    if (flags & 4) {
        struct tg_svc_reader *r = tg_svc_reader_new(g_svc->sessions);
        struct tg_svc_reader_pkt pk;
        size_t total = 0;
        while (r && tg_svc_reader_next(r, &pk)) {
            for (size_t i = 0; i < pk.n; i++)
                total += pk.slices[i].len;
            total += pk.trusted_len;
        }
        tg_svc_reader_free(r);
        (void)total;
    }
    drain();
    return 0;
}
