/* test_frame_codec.c: the IPC frame deserializer (tg_frame_reader, tg_frame_peek), scanner and
 * encoders against the real Perfetto recordings in ../shared/interop, split at every byte, at
 * random boundaries and at the recorded read() boundaries, plus oversize / empty / garbage frames. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

#include "tg_test_util.h"

/* ------------------------------------------------------------------ helpers */

/* Reference framing, written independently of the library: offsets of the
 * bodies of every non-empty frame in a stream. */
struct ref_frames {
    size_t n;
    size_t *off, *len, *end; /* end = offset just past the frame */
    int complete;            /* stream ends exactly on a frame boundary */
};

static void ref_frames_build(const uint8_t *s, size_t n, struct ref_frames *rf)
{
    memset(rf, 0, sizeof *rf);
    size_t cap = 64;
    rf->off = malloc(cap * sizeof(size_t));
    rf->len = malloc(cap * sizeof(size_t));
    rf->end = malloc(cap * sizeof(size_t));
    assert_non_null(rf->off);
    assert_non_null(rf->len);
    assert_non_null(rf->end);
    size_t p = 0;
    while (n - p >= 4) {
        size_t l = (size_t)s[p] | (size_t)s[p + 1] << 8 | (size_t)s[p + 2] << 16 | (size_t)s[p + 3] << 24;
        if (n - p - 4 < l)
            break;
        if (l) {
            if (rf->n == cap) {
                cap *= 2;
                rf->off = realloc(rf->off, cap * sizeof(size_t));
                rf->len = realloc(rf->len, cap * sizeof(size_t));
                rf->end = realloc(rf->end, cap * sizeof(size_t));
                assert_non_null(rf->off);
                assert_non_null(rf->len);
                assert_non_null(rf->end);
            }
            rf->off[rf->n] = p + 4;
            rf->len[rf->n] = l;
            rf->end[rf->n] = p + 4 + l;
            rf->n++;
        }
        p += 4 + l;
    }
    rf->complete = p == n;
}

static void ref_frames_free(struct ref_frames *rf)
{
    free(rf->off);
    free(rf->len);
    free(rf->end);
}

/* Number of reference frames complete within the first k bytes. */
static size_t frames_complete_by(const struct ref_frames *rf, size_t k)
{
    size_t lo = 0, hi = rf->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rf->end[mid] <= k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct recs {
    char **paths;
    size_t n;
};

static int load_recordings(struct recs *r)
{
    const char *dir = tg_test_recordings_dir();
    r->paths = NULL;
    r->n = 0;
    if (!dir)
        return -1;
    r->n = tg_test_list_dir(dir, ".bin", &r->paths);
    return r->n ? 0 : -1;
}

#define NEED_RECORDINGS(r)                                                                                   \
    do {                                                                                                     \
        if (load_recordings(r) != 0) {                                                                       \
            print_message("SKIP: ../shared/interop/recordings not found (set TG_SHARED_DIR)\n");           \
            skip();                                                                                          \
        }                                                                                                    \
    } while (0)

/* Drains every READY frame from a reader, checking each against the
 * reference; returns the final status. *idx advances. */
static enum tg_frame_status drain_reader(tg_frame_reader *r, const uint8_t *s, const struct ref_frames *rf,
                                         size_t *idx, const char *what, size_t k)
{
    const uint8_t *body;
    size_t len;
    enum tg_frame_status st;
    while ((st = tg_frame_reader_next(r, &body, &len)) == TG_FRAME_READY) {
        if (*idx >= rf->n)
            fail_msg("%s split@%zu: extra frame #%zu (len %zu)", what, k, *idx, len);
        if (len != rf->len[*idx] || memcmp(body, s + rf->off[*idx], len) != 0)
            fail_msg("%s split@%zu: frame #%zu differs (len %zu, want %zu)", what, k, *idx, len, rf->len[*idx]);
        (*idx)++;
    }
    return st;
}

static enum tg_frame_status drain_peek(struct evbuffer *b, const uint8_t *s, const struct ref_frames *rf, size_t *idx,
                                       const char *what, size_t k)
{
    size_t len;
    enum tg_frame_status st;
    while ((st = tg_frame_peek(b, TG_FRAME_MAX_DEFAULT, &len)) == TG_FRAME_READY) {
        if (*idx >= rf->n)
            fail_msg("%s split@%zu: extra frame #%zu (len %zu)", what, k, *idx, len);
        const uint8_t *body = tg_frame_body(b, len);
        if (!body)
            fail_msg("%s split@%zu: tg_frame_body failed", what, k);
        if (len != rf->len[*idx] || memcmp(body, s + rf->off[*idx], len) != 0)
            fail_msg("%s split@%zu: frame #%zu differs (len %zu, want %zu)", what, k, *idx, len, rf->len[*idx]);
        tg_frame_drain(b, len);
        (*idx)++;
    }
    return st;
}

/* ------------------------------------------- expected frames from the .txt */

struct exp_method {
    uint32_t id;
    char name[64];
};

struct exp_frame {
    int dir;
    size_t len;
    int has_fd;
    uint64_t request_id;
    enum tg_ipc_msg msg;
    uint32_t service_id, method_id;
    int drop_reply, success, has_more;
    uint8_t *payload;
    size_t payload_len;
    int has_payload;
    char service_name[64];
    struct exp_method methods[32];
    size_t n_methods;
};

struct exp_list {
    struct exp_frame *f;
    size_t n;
};

/* Undoes protobuf text-format C escaping ("\n", "\253", "\"", ...). */
static uint8_t *unescape(const char *s, size_t *out_len)
{
    size_t n = strlen(s), o = 0;
    uint8_t *out = malloc(n + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            out[o++] = (uint8_t)s[i];
            continue;
        }
        i++;
        assert_true(i < n);
        char c = s[i];
        if (c >= '0' && c <= '7') {
            unsigned v = 0;
            for (int d = 0; d < 3 && i < n && s[i] >= '0' && s[i] <= '7'; d++, i++)
                v = v * 8 + (unsigned)(s[i] - '0');
            i--;
            out[o++] = (uint8_t)v;
        } else if (c == 'x') {
            unsigned v = 0;
            for (int d = 0; d < 2 && i + 1 < n && strchr("0123456789abcdefABCDEF", s[i + 1]); d++) {
                i++;
                v = v * 16 + (unsigned)(s[i] <= '9' ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10);
            }
            out[o++] = (uint8_t)v;
        } else {
            switch (c) {
            case 'n': out[o++] = '\n'; break;
            case 'r': out[o++] = '\r'; break;
            case 't': out[o++] = '\t'; break;
            case 'a': out[o++] = '\a'; break;
            case 'b': out[o++] = '\b'; break;
            case 'f': out[o++] = '\f'; break;
            case 'v': out[o++] = '\v'; break;
            default: out[o++] = (uint8_t)c; break; /* \" \' \\ ? */
            }
        }
    }
    *out_len = o;
    return out;
}

/* value of a quoted string after `key: "` (without the closing quote). */
static char *quoted(const char *line)
{
    const char *q = strchr(line, '"');
    assert_non_null(q);
    const char *e = strrchr(line, '"');
    assert_true(e > q);
    size_t l = (size_t)(e - q - 1);
    char *r = malloc(l + 1);
    assert_non_null(r);
    memcpy(r, q + 1, l);
    r[l] = 0;
    return r;
}

static int parse_bool(const char *v)
{
    if (strncmp(v, "true", 4) == 0)
        return 1;
    assert_true(strncmp(v, "false", 5) == 0);
    return 0;
}

static void load_expected(const char *txt_path, struct exp_list *el)
{
    uint8_t *data;
    size_t len;
    el->f = NULL;
    el->n = 0;
    assert_int_equal(tg_test_read_file(txt_path, &data, &len), 0);
    size_t cap = 0;
    struct exp_frame *cur = NULL;
    int in_msg = 0;
    char *save = NULL;
    for (char *line = strtok_r((char *)data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "=== ", 4) == 0 && (strstr(line, "C->S") || strstr(line, "S->C"))) {
            if (el->n == cap) {
                cap = cap ? cap * 2 : 16;
                el->f = realloc(el->f, cap * sizeof *el->f);
                assert_non_null(el->f);
            }
            cur = &el->f[el->n++];
            memset(cur, 0, sizeof *cur);
            cur->dir = strstr(line, "C->S") ? TG_REC_C2S : TG_REC_S2C;
            const char *l = strstr(line, "len=");
            assert_non_null(l);
            cur->len = (size_t)strtoul(l + 4, NULL, 10);
            cur->has_fd = strstr(line, "+fd") != NULL;
            in_msg = 0;
            continue;
        }
        if (!cur)
            continue;
        if (strncmp(line, "request_id: ", 12) == 0) {
            cur->request_id = strtoull(line + 12, NULL, 10);
        } else if (strcmp(line, "msg_bind_service {") == 0) {
            cur->msg = TG_MSG_BIND_SERVICE, in_msg = 1;
        } else if (strcmp(line, "msg_bind_service_reply {") == 0) {
            cur->msg = TG_MSG_BIND_SERVICE_REPLY, in_msg = 1;
        } else if (strcmp(line, "msg_invoke_method {") == 0) {
            cur->msg = TG_MSG_INVOKE_METHOD, in_msg = 1;
        } else if (strcmp(line, "msg_invoke_method_reply {") == 0) {
            cur->msg = TG_MSG_INVOKE_METHOD_REPLY, in_msg = 1;
        } else if (strcmp(line, "msg_request_error {") == 0) {
            cur->msg = TG_MSG_REQUEST_ERROR, in_msg = 1;
        } else if (strcmp(line, "set_peer_identity {") == 0) {
            cur->msg = TG_MSG_SET_PEER_IDENTITY, in_msg = 1;
        } else if (strcmp(line, "}") == 0) {
            in_msg = 0;
        } else if (in_msg && strncmp(line, "  ", 2) == 0 && line[2] != ' ') {
            const char *kv = line + 2;
            if (strncmp(kv, "service_id: ", 12) == 0)
                cur->service_id = (uint32_t)strtoul(kv + 12, NULL, 10);
            else if (strncmp(kv, "method_id: ", 11) == 0)
                cur->method_id = (uint32_t)strtoul(kv + 11, NULL, 10);
            else if (strncmp(kv, "drop_reply: ", 12) == 0)
                cur->drop_reply = parse_bool(kv + 12);
            else if (strncmp(kv, "success: ", 9) == 0)
                cur->success = parse_bool(kv + 9);
            else if (strncmp(kv, "has_more: ", 10) == 0)
                cur->has_more = parse_bool(kv + 10);
            else if (strncmp(kv, "args_proto: ", 12) == 0 || strncmp(kv, "reply_proto: ", 13) == 0) {
                char *q = quoted(kv);
                cur->payload = unescape(q, &cur->payload_len);
                cur->has_payload = 1;
                free(q);
            } else if (strncmp(kv, "service_name: ", 14) == 0) {
                char *q = quoted(kv);
                snprintf(cur->service_name, sizeof cur->service_name, "%s", q);
                free(q);
            } else if (strcmp(kv, "methods {") == 0) {
                assert_true(cur->n_methods < 32);
                cur->n_methods++;
            }
        } else if (in_msg && strncmp(line, "    id: ", 8) == 0 && cur->n_methods) {
            cur->methods[cur->n_methods - 1].id = (uint32_t)strtoul(line + 8, NULL, 10);
        } else if (in_msg && strncmp(line, "    name: ", 10) == 0 && cur->n_methods) {
            char *q = quoted(line);
            snprintf(cur->methods[cur->n_methods - 1].name, sizeof cur->methods[0].name, "%s", q);
            free(q);
        }
    }
    free(data);
}

static void free_expected(struct exp_list *el)
{
    for (size_t i = 0; i < el->n; i++)
        free(el->f[i].payload);
    free(el->f);
}

struct got_methods {
    struct exp_method m[32];
    size_t n;
};

static void collect_method(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct got_methods *g = arg;
    assert_true(g->n < 32);
    assert_true(nl < sizeof g->m[0].name);
    g->m[g->n].id = id;
    memcpy(g->m[g->n].name, name, nl);
    g->m[g->n].name[nl] = 0;
    g->n++;
}

/* ------------------------------------------------------------------- tests */

/* Every recording, fed whole, gives the frame sequence its .txt lists, and the
 * scanner reads the same fields Perfetto's decoder printed. */
static void test_recordings_match_txt(void **state)
{
    (void)state;
    struct recs rs;
    NEED_RECORDINGS(&rs);
    size_t total_frames = 0;
    for (size_t i = 0; i < rs.n; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(rs.paths[i], &rec), 0);
        char txt[600];
        snprintf(txt, sizeof txt, "%.*s.txt", (int)(strlen(rs.paths[i]) - 4), rs.paths[i]);
        struct exp_list el;
        load_expected(txt, &el);
        assert_true(el.n > 0);
        size_t next_exp[2] = {0, 0};
        for (int d = 0; d < 2; d++) {
            tg_frame_reader *r = tg_frame_reader_new(0);
            assert_non_null(r);
            assert_int_equal(tg_frame_reader_feed(r, rec.stream[d], rec.stream_len[d]), 0);
            const uint8_t *body;
            size_t len;
            enum tg_frame_status st;
            while ((st = tg_frame_reader_next(r, &body, &len)) == TG_FRAME_READY) {
                /* next expected frame of this direction */
                size_t e = next_exp[d];
                while (e < el.n && el.f[e].dir != d)
                    e++;
                if (e >= el.n)
                    fail_msg("%s dir %d: more frames than the .txt lists", rec.name, d);
                next_exp[d] = e + 1;
                const struct exp_frame *x = &el.f[e];
                if (len != x->len)
                    fail_msg("%s frame %zu: len %zu, .txt says %zu", rec.name, e, len, x->len);
                struct tg_frame_info fi;
                if (tg_frame_scan(body, len, &fi) != 0)
                    fail_msg("%s frame %zu: tg_frame_scan failed on a real Perfetto frame", rec.name, e);
                assert_int_equal(fi.request_id, x->request_id);
                assert_int_equal(fi.msg, x->msg);
                switch (x->msg) {
                case TG_MSG_BIND_SERVICE:
                    assert_int_equal(fi.service_name_len, strlen(x->service_name));
                    assert_memory_equal(fi.service_name, x->service_name, fi.service_name_len);
                    break;
                case TG_MSG_INVOKE_METHOD:
                    assert_int_equal(fi.service_id, x->service_id);
                    assert_int_equal(fi.method_id, x->method_id);
                    assert_int_equal(fi.drop_reply, x->drop_reply);
                    assert_int_equal(fi.has_payload, x->has_payload);
                    assert_int_equal(fi.payload_len, x->payload_len);
                    if (x->payload_len)
                        assert_memory_equal(fi.payload, x->payload, x->payload_len);
                    break;
                case TG_MSG_INVOKE_METHOD_REPLY:
                    assert_int_equal(fi.success, x->success);
                    assert_int_equal(fi.has_more, x->has_more);
                    assert_int_equal(fi.has_payload, x->has_payload);
                    assert_int_equal(fi.payload_len, x->payload_len);
                    if (x->payload_len)
                        assert_memory_equal(fi.payload, x->payload, x->payload_len);
                    break;
                case TG_MSG_BIND_SERVICE_REPLY: {
                    struct got_methods g = {.n = 0};
                    int ok = 0;
                    uint32_t sid = 0;
                    assert_int_equal(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, collect_method, &g), 0);
                    assert_int_equal(ok, x->success);
                    assert_int_equal(sid, x->service_id);
                    assert_int_equal(g.n, x->n_methods);
                    for (size_t m = 0; m < g.n; m++) {
                        assert_int_equal(g.m[m].id, x->methods[m].id);
                        assert_string_equal(g.m[m].name, x->methods[m].name);
                    }
                    break;
                }
                default:
                    break;
                }
                total_frames++;
            }
            assert_int_equal(st, TG_FRAME_NEED_MORE);
            /* every frame of this direction was seen */
            for (size_t e = next_exp[d]; e < el.n; e++)
                if (el.f[e].dir == d)
                    fail_msg("%s: the reader missed frame %zu of dir %d", rec.name, e, d);
            tg_frame_reader_free(r);
        }
        free_expected(&el);
        tg_recording_free(&rec);
    }
    assert_true(total_frames >= 100); /* 108 frames in the v58.2 set */
    tg_test_free_list(rs.paths, rs.n);
}

/* The example from the brief, asserted directly (independent of the .txt parser). */
static void test_query_service_state_first_frames(void **state)
{
    (void)state;
    const char *dir = tg_test_recordings_dir();
    if (!dir) {
        print_message("SKIP: ../shared/interop/recordings not found (set TG_SHARED_DIR)\n");
        skip();
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/consumer_query_service_state.bin", dir);
    struct tg_recording rec;
    assert_int_equal(tg_recording_load(path, &rec), 0);

    tg_frame_reader *r = tg_frame_reader_new(0);
    assert_non_null(r);
    assert_int_equal(tg_frame_reader_feed(r, rec.stream[TG_REC_C2S], rec.stream_len[TG_REC_C2S]), 0);
    const uint8_t *body;
    size_t len;
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
    assert_int_equal(len, 18);
    assert_int_equal(tg_frame_scan(body, len, &fi), 0);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE);
    assert_int_equal(fi.request_id, 1);
    assert_int_equal(fi.service_name_len, 12);
    assert_memory_equal(fi.service_name, "ConsumerPort", 12);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
    assert_int_equal(tg_frame_scan(body, len, &fi), 0);
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD);
    assert_int_equal(fi.request_id, 2);
    assert_int_equal(fi.service_id, 1);
    assert_int_equal(fi.method_id, 12); /* QueryServiceState */
    assert_int_equal(fi.drop_reply, 0);
    assert_int_equal(fi.payload_len, 2);
    assert_memory_equal(fi.payload, "\x08\x00", 2);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_NEED_MORE);
    tg_frame_reader_free(r);

    r = tg_frame_reader_new(0);
    assert_int_equal(tg_frame_reader_feed(r, rec.stream[TG_REC_S2C], rec.stream_len[TG_REC_S2C]), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
    assert_int_equal(tg_frame_scan(body, len, &fi), 0);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    assert_int_equal(fi.request_id, 1);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
    assert_int_equal(tg_frame_scan(body, len, &fi), 0);
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
    assert_int_equal(fi.request_id, 2);
    assert_int_equal(fi.success, 1);
    assert_int_equal(fi.has_more, 0);
    assert_true(fi.has_payload && fi.payload_len > 100);
    tg_frame_reader_free(r);
    tg_recording_free(&rec);
}

/* Split at every byte boundary k: feed [0,k), drain, feed [k,n), drain. The
 * frames must equal the whole-feed frames, and each frame must come out as
 * soon as its last byte is in (not later). */
static void test_every_split_reader(void **state)
{
    (void)state;
    struct recs rs;
    NEED_RECORDINGS(&rs);
    for (size_t i = 0; i < rs.n; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(rs.paths[i], &rec), 0);
        for (int d = 0; d < 2; d++) {
            const uint8_t *s = rec.stream[d];
            size_t n = rec.stream_len[d];
            struct ref_frames rf;
            ref_frames_build(s, n, &rf);
            assert_true(rf.complete);
            for (size_t k = 0; k <= n; k++) {
                tg_frame_reader *r = tg_frame_reader_new(0);
                assert_non_null(r);
                size_t idx = 0;
                assert_int_equal(tg_frame_reader_feed(r, s, k), 0);
                if (drain_reader(r, s, &rf, &idx, rec.name, k) != TG_FRAME_NEED_MORE)
                    fail_msg("%s dir %d split@%zu: bad status after the first part", rec.name, d, k);
                if (idx != frames_complete_by(&rf, k))
                    fail_msg("%s dir %d split@%zu: %zu frames out, %zu complete", rec.name, d, k, idx,
                             frames_complete_by(&rf, k));
                assert_int_equal(tg_frame_reader_feed(r, s + k, n - k), 0);
                if (drain_reader(r, s, &rf, &idx, rec.name, k) != TG_FRAME_NEED_MORE)
                    fail_msg("%s dir %d split@%zu: bad status at the end", rec.name, d, k);
                if (idx != rf.n)
                    fail_msg("%s dir %d split@%zu: %zu frames, want %zu", rec.name, d, k, idx, rf.n);
                tg_frame_reader_free(r);
            }
            ref_frames_free(&rf);
        }
        tg_recording_free(&rec);
    }
    tg_test_free_list(rs.paths, rs.n);
}

/* The same with tg_frame_peek/body/drain on an evbuffer whose chains break at
 * k (zero-copy references, so a frame straddling k spans two chains). */
static void test_every_split_peek(void **state)
{
    (void)state;
    struct recs rs;
    NEED_RECORDINGS(&rs);
    for (size_t i = 0; i < rs.n; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(rs.paths[i], &rec), 0);
        for (int d = 0; d < 2; d++) {
            const uint8_t *s = rec.stream[d];
            size_t n = rec.stream_len[d];
            struct ref_frames rf;
            ref_frames_build(s, n, &rf);
            for (size_t k = 0; k <= n; k++) {
                struct evbuffer *b = evbuffer_new();
                assert_non_null(b);
                size_t idx = 0;
                if (k)
                    assert_int_equal(evbuffer_add_reference(b, s, k, NULL, NULL), 0);
                if (drain_peek(b, s, &rf, &idx, rec.name, k) != TG_FRAME_NEED_MORE ||
                    idx != frames_complete_by(&rf, k))
                    fail_msg("%s dir %d split@%zu: wrong frames after the first part", rec.name, d, k);
                if (n - k)
                    assert_int_equal(evbuffer_add_reference(b, s + k, n - k, NULL, NULL), 0);
                if (drain_peek(b, s, &rf, &idx, rec.name, k) != TG_FRAME_NEED_MORE || idx != rf.n)
                    fail_msg("%s dir %d split@%zu: %zu frames, want %zu", rec.name, d, k, idx, rf.n);
                assert_int_equal(evbuffer_get_length(b), 0);
                evbuffer_free(b);
            }
            ref_frames_free(&rf);
        }
        tg_recording_free(&rec);
    }
    tg_test_free_list(rs.paths, rs.n);
}

/* Many pieces at random boundaries (seeded), frames drained after every
 * piece; also tg_frame_move to a second buffer keeps header and body intact. */
static void test_random_splits(void **state)
{
    (void)state;
    struct recs rs;
    NEED_RECORDINGS(&rs);
    for (size_t i = 0; i < rs.n; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(rs.paths[i], &rec), 0);
        for (int d = 0; d < 2; d++) {
            const uint8_t *s = rec.stream[d];
            size_t n = rec.stream_len[d];
            struct ref_frames rf;
            ref_frames_build(s, n, &rf);
            for (uint64_t seed = 1; seed <= 24; seed++) {
                uint64_t st = seed * 7919 + i * 104729 + (uint64_t)d;
                /* small pieces for some seeds, big ones for others */
                size_t maxpiece = seed % 3 == 0 ? 7 : seed % 3 == 1 ? 300 : 9000;
                tg_frame_reader *r = tg_frame_reader_new(0);
                struct evbuffer *b = evbuffer_new();
                struct evbuffer *moved = evbuffer_new();
                assert_non_null(r);
                assert_non_null(b);
                assert_non_null(moved);
                size_t ridx = 0, pidx = 0, pos = 0, pieces = 0;
                while (pos < n) {
                    size_t piece = tg_test_rand_range(&st, 1, maxpiece);
                    if (piece > n - pos)
                        piece = n - pos;
                    assert_int_equal(tg_frame_reader_feed(r, s + pos, piece), 0);
                    assert_int_equal(evbuffer_add(b, s + pos, piece), 0);
                    pos += piece;
                    pieces++;
                    if (drain_reader(r, s, &rf, &ridx, rec.name, pos) != TG_FRAME_NEED_MORE)
                        fail_msg("%s seed %llu: reader error", rec.name, (unsigned long long)seed);
                    size_t len;
                    while (tg_frame_peek(b, TG_FRAME_MAX_DEFAULT, &len) == TG_FRAME_READY) {
                        if (pidx >= rf.n || len != rf.len[pidx])
                            fail_msg("%s seed %llu: peek frame %zu wrong", rec.name, (unsigned long long)seed, pidx);
                        assert_int_equal(tg_frame_move(b, moved, len), 0);
                        /* the moved frame is the original bytes, header included */
                        uint8_t *m = evbuffer_pullup(moved, -1);
                        assert_int_equal(evbuffer_get_length(moved), len + 4);
                        if (memcmp(m, s + rf.off[pidx] - 4, len + 4) != 0)
                            fail_msg("%s seed %llu: moved frame %zu differs", rec.name, (unsigned long long)seed,
                                     pidx);
                        evbuffer_drain(moved, len + 4);
                        pidx++;
                    }
                    if (ridx != frames_complete_by(&rf, pos) || pidx != ridx)
                        fail_msg("%s seed %llu at %zu: reader %zu, peek %zu, want %zu", rec.name,
                                 (unsigned long long)seed, pos, ridx, pidx, frames_complete_by(&rf, pos));
                }
                assert_int_equal(ridx, rf.n);
                assert_int_equal(pidx, rf.n);
                if (maxpiece == 7 && n > 100)
                    assert_true(pieces > n / 8); /* really many pieces */
                tg_frame_reader_free(r);
                evbuffer_free(b);
                evbuffer_free(moved);
            }
            ref_frames_free(&rf);
        }
        tg_recording_free(&rec);
    }
    tg_test_free_list(rs.paths, rs.n);
}

/* The boundaries the recording relay saw (one record per read()): frames
 * split or joined across records come out whole. */
static void test_recorded_read_boundaries(void **state)
{
    (void)state;
    struct recs rs;
    NEED_RECORDINGS(&rs);
    for (size_t i = 0; i < rs.n; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(rs.paths[i], &rec), 0);
        struct ref_frames rf[2];
        ref_frames_build(rec.stream[0], rec.stream_len[0], &rf[0]);
        ref_frames_build(rec.stream[1], rec.stream_len[1], &rf[1]);
        tg_frame_reader *r[2] = {tg_frame_reader_new(0), tg_frame_reader_new(0)};
        size_t idx[2] = {0, 0}, pos[2] = {0, 0};
        for (size_t j = 0; j < rec.n_recs; j++) {
            const struct tg_rec_record *x = &rec.recs[j];
            if (x->dir == TG_REC_SMB)
                continue; /* SMB snapshots are not stream bytes */
            int d = x->dir;
            assert_int_equal(tg_frame_reader_feed(r[d], x->data, x->len), 0);
            pos[d] += x->len;
            assert_int_equal(drain_reader(r[d], rec.stream[d], &rf[d], &idx[d], rec.name, pos[d]), TG_FRAME_NEED_MORE);
            assert_int_equal(idx[d], frames_complete_by(&rf[d], pos[d]));
        }
        assert_int_equal(idx[0], rf[0].n);
        assert_int_equal(idx[1], rf[1].n);
        for (int d = 0; d < 2; d++) {
            tg_frame_reader_free(r[d]);
            ref_frames_free(&rf[d]);
        }
        tg_recording_free(&rec);
    }
    tg_test_free_list(rs.paths, rs.n);
}

/* ---------------------------------------------------- synthetic edge cases */

static void put_le32(uint8_t *p, uint32_t v)
{
    tg_frame_put_header(p, v);
}

static void test_oversize(void **state)
{
    (void)state;
    const uint8_t *body;
    size_t len;
    uint8_t hdr[4];

    /* exactly at the limit (4 + 131068 = 128 KiB) is accepted */
    tg_frame_reader *r = tg_frame_reader_new(0);
    put_le32(hdr, TG_FRAME_MAX_DEFAULT - 4);
    assert_int_equal(tg_frame_reader_feed(r, hdr, 4), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_NEED_MORE);
    uint8_t *big = calloc(1, TG_FRAME_MAX_DEFAULT);
    assert_non_null(big);
    big[0] = 0x10; /* request_id: 0x20 ... valid enough, not scanned here */
    assert_int_equal(tg_frame_reader_feed(r, big, TG_FRAME_MAX_DEFAULT - 4), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
    assert_int_equal(len, TG_FRAME_MAX_DEFAULT - 4);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_NEED_MORE);
    tg_frame_reader_free(r);

    /* one byte more is OVERSIZE, announced from the header alone, and sticky */
    r = tg_frame_reader_new(0);
    uint8_t ok_frame[] = {2, 0, 0, 0, 0x10, 0x05};
    assert_int_equal(tg_frame_reader_feed(r, ok_frame, sizeof ok_frame), 0);
    put_le32(hdr, TG_FRAME_MAX_DEFAULT - 3);
    assert_int_equal(tg_frame_reader_feed(r, hdr, 2), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY); /* the frame before still comes out */
    assert_int_equal(len, 2);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_NEED_MORE); /* half a header */
    assert_int_equal(tg_frame_reader_feed(r, hdr + 2, 2), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_OVERSIZE);
    assert_int_equal(tg_frame_reader_feed(r, ok_frame, sizeof ok_frame), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_OVERSIZE);
    tg_frame_reader_free(r);

    /* 0xffffffff must not wrap around */
    r = tg_frame_reader_new(0);
    memset(hdr, 0xff, 4);
    assert_int_equal(tg_frame_reader_feed(r, hdr, 4), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_OVERSIZE);
    tg_frame_reader_free(r);

    /* a custom limit counts header + body */
    r = tg_frame_reader_new(100);
    put_le32(hdr, 97);
    assert_int_equal(tg_frame_reader_feed(r, hdr, 4), 0);
    assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_OVERSIZE);
    tg_frame_reader_free(r);

    /* tg_frame_peek directly: OVERSIZE, and the buffer is left alone for the caller to close */
    struct evbuffer *b = evbuffer_new();
    put_le32(hdr, 200000);
    evbuffer_add(b, hdr, 4);
    assert_int_equal(tg_frame_peek(b, TG_FRAME_MAX_DEFAULT, &len), TG_FRAME_OVERSIZE);
    put_le32(hdr, 96);
    evbuffer_drain(b, 4);
    evbuffer_add(b, hdr, 4);
    assert_int_equal(tg_frame_peek(b, 100, &len), TG_FRAME_NEED_MORE);
    evbuffer_add(b, big, 96);
    assert_int_equal(tg_frame_peek(b, 100, &len), TG_FRAME_READY);
    assert_int_equal(len, 96);
    evbuffer_free(b);
    free(big);
}

static const uint8_t k_bind7[] = {0x10, 0x07, 0x1a, 0x0e, 0x0a, 0x0c, 'C', 'o', 'n', 's', 'u',
                                  'm',  'e',  'r',  'P',  'o',  'r',  't'};

static void test_zero_length_skipped(void **state)
{
    (void)state;
    uint8_t stream[64];
    size_t n = 0;
    memset(stream, 0, sizeof stream);
    n += 4; /* empty frame first */
    put_le32(stream + n, sizeof k_bind7);
    memcpy(stream + n + 4, k_bind7, sizeof k_bind7);
    n += 4 + sizeof k_bind7;
    n += 8; /* two empty frames between */
    put_le32(stream + n, 2);
    stream[n + 4] = 0x10;
    stream[n + 5] = 0x09;
    n += 6;
    n += 4; /* trailing empty frame */

    /* whole and byte-by-byte give the same two frames */
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        tg_frame_reader *r = tg_frame_reader_new(0);
        const uint8_t *body;
        size_t len;
        int got = 0;
        for (size_t p = 0; p < n; p += bytewise ? 1 : n) {
            assert_int_equal(tg_frame_reader_feed(r, stream + p, bytewise ? 1 : n), 0);
            enum tg_frame_status st;
            while ((st = tg_frame_reader_next(r, &body, &len)) == TG_FRAME_READY) {
                assert_true(len > 0);
                struct tg_frame_info fi;
                assert_int_equal(tg_frame_scan(body, len, &fi), 0);
                assert_int_equal(fi.request_id, got == 0 ? 7 : 9);
                got++;
            }
            assert_int_equal(st, TG_FRAME_NEED_MORE);
        }
        assert_int_equal(got, 2);
        tg_frame_reader_free(r);
    }

    /* peek drains empty frames it walks over */
    struct evbuffer *b = evbuffer_new();
    uint8_t zeros[12] = {0};
    evbuffer_add(b, zeros, sizeof zeros);
    size_t len = 12345;
    assert_int_equal(tg_frame_peek(b, TG_FRAME_MAX_DEFAULT, &len), TG_FRAME_NEED_MORE);
    assert_int_equal(evbuffer_get_length(b), 0);
    evbuffer_add(b, zeros, 2); /* half an empty header: nothing to do yet */
    assert_int_equal(tg_frame_peek(b, TG_FRAME_MAX_DEFAULT, &len), TG_FRAME_NEED_MORE);
    assert_int_equal(evbuffer_get_length(b), 2);
    evbuffer_add(b, zeros, 2);
    assert_int_equal(tg_frame_peek(b, TG_FRAME_MAX_DEFAULT, &len), TG_FRAME_NEED_MORE);
    assert_int_equal(evbuffer_get_length(b), 0);
    evbuffer_free(b);
}

/* Bytes that are not an IPCFrame: the scanner rejects them (Perfetto drops
 * such a frame), and the next frame is still read and scanned fine. */
static void test_garbage_then_good(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        uint8_t b[8];
        size_t n;
    } garbage[] = {
        {"all 0xff", {0xff, 0xff, 0xff}, 3},
        {"truncated varint value", {0x10}, 1},
        {"varint too long", {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 8},
        {"wire type 7", {0x0f, 0x00}, 2},
        {"field number 0", {0x00, 0x01}, 2},
        {"length past the end", {0x1a, 0x05, 0x01}, 3},
        {"group start", {0x1b, 0x00}, 2},
        {"oneof member as varint", {0x28, 0x01}, 2},
        {"garbage inside msg_bind_service", {0x1a, 0x02, 0xff, 0xff}, 4},
        {"garbage inside msg_invoke_method", {0x2a, 0x03, 0x1a, 0x09, 0x00}, 5},
        {"truncated fixed64", {0x09, 0x01, 0x02}, 3},
    };
    for (size_t g = 0; g < sizeof garbage / sizeof garbage[0]; g++) {
        struct tg_frame_info fi;
        if (tg_frame_scan(garbage[g].b, garbage[g].n, &fi) != -1)
            fail_msg("garbage '%s' was accepted by tg_frame_scan", garbage[g].what);
        tg_frame_reader *r = tg_frame_reader_new(0);
        uint8_t hdr[4];
        put_le32(hdr, (uint32_t)garbage[g].n);
        tg_frame_reader_feed(r, hdr, 4);
        tg_frame_reader_feed(r, garbage[g].b, garbage[g].n);
        put_le32(hdr, sizeof k_bind7);
        tg_frame_reader_feed(r, hdr, 4);
        tg_frame_reader_feed(r, k_bind7, sizeof k_bind7);
        const uint8_t *body;
        size_t len;
        assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
        assert_int_equal(len, garbage[g].n);
        assert_int_equal(tg_frame_scan(body, len, &fi), -1);
        assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_READY);
        assert_int_equal(tg_frame_scan(body, len, &fi), 0);
        assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE);
        assert_int_equal(fi.request_id, 7);
        assert_memory_equal(fi.service_name, "ConsumerPort", 12);
        assert_int_equal(tg_frame_reader_next(r, &body, &len), TG_FRAME_NEED_MORE);
        tg_frame_reader_free(r);
    }
}

/* The worked bytes of wire-facts §1.6 (produced by protoc from upstream protos). */
static void test_scan_worked_bytes(void **state)
{
    (void)state;
    struct tg_frame_info fi;
    static const uint8_t bind[] = {0x10, 0x01, 0x1a, 0x0e, 0x0a, 0x0c, 'P', 'r', 'o', 'd',
                                   'u',  'c',  'e',  'r',  'P',  'o',  'r', 't'};
    assert_int_equal(tg_frame_scan(bind, sizeof bind, &fi), 0);
    assert_int_equal(fi.request_id, 1);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE);
    assert_int_equal(fi.service_name_len, 12);
    assert_memory_equal(fi.service_name, "ProducerPort", 12);
    uint8_t buf[256];
    assert_int_equal(tg_ipc_encode_bind(buf, sizeof buf, 1, "ProducerPort"), sizeof bind);
    assert_memory_equal(buf, bind, sizeof bind);

    static const uint8_t invoke[] = {0x10, 0x02, 0x2a, 0x09, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x03, 0x08, 0x80, 0x20};
    assert_int_equal(tg_frame_scan(invoke, sizeof invoke, &fi), 0);
    assert_int_equal(fi.request_id, 2);
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD);
    assert_int_equal(fi.service_id, 1);
    assert_int_equal(fi.method_id, 1);
    assert_int_equal(fi.drop_reply, 0);
    assert_int_equal(fi.payload_len, 3);
    assert_memory_equal(fi.payload, "\x08\x80\x20", 3);

    static const uint8_t reply[] = {0x10, 0x03, 0x32, 0x06, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x00};
    assert_int_equal(tg_frame_scan(reply, sizeof reply, &fi), 0);
    assert_int_equal(fi.request_id, 3);
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
    assert_int_equal(fi.success, 1);
    assert_int_equal(fi.has_more, 1);
    assert_int_equal(fi.has_payload, 1); /* present but empty: an empty message */
    assert_int_equal(fi.payload_len, 0);
    assert_int_equal(tg_ipc_encode_reply(buf, sizeof buf, 3, 1, 1, NULL, 0), sizeof reply);
    assert_memory_equal(buf, reply, sizeof reply);

    static const uint8_t bind_reply[] = {0x10, 0x01, 0x22, 0x1e, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x18, 0x08, 0x01,
                                         0x12, 0x14, 'I',  'n',  'i',  't',  'i',  'a',  'l',  'i',  'z',  'e',
                                         'C',  'o',  'n',  'n',  'e',  'c',  't',  'i',  'o',  'n'};
    assert_int_equal(tg_frame_scan(bind_reply, sizeof bind_reply, &fi), 0);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    struct got_methods g = {.n = 0};
    int ok;
    uint32_t sid;
    assert_int_equal(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, collect_method, &g), 0);
    assert_int_equal(ok, 1);
    assert_int_equal(sid, 1);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.m[0].name, "InitializeConnection");
    struct tg_ipc_method_info mi = {1, "InitializeConnection"};
    assert_int_equal(tg_ipc_encode_bind_reply(buf, sizeof buf, 1, 1, 1, &mi, 1), sizeof bind_reply);
    assert_memory_equal(buf, bind_reply, sizeof bind_reply);

    /* extreme request ids and an empty args_proto survive encode + scan */
    size_t n = tg_ipc_encode_invoke(buf, sizeof buf, UINT64_MAX, 0xffffffffu, 7, NULL, 0, 1);
    assert_true(n > 0);
    assert_int_equal(tg_frame_scan(buf, n, &fi), 0);
    assert_true(fi.request_id == UINT64_MAX);
    assert_int_equal(fi.service_id, 0xffffffffu);
    assert_int_equal(fi.method_id, 7);
    assert_int_equal(fi.drop_reply, 1);
    assert_int_equal(fi.has_payload, 1);
    assert_int_equal(fi.payload_len, 0);
    /* too small a buffer is refused, NULL asks for the size */
    assert_int_equal(tg_ipc_encode_invoke(buf, n - 1, UINT64_MAX, 0xffffffffu, 7, NULL, 0, 1), 0);
    assert_int_equal(tg_ipc_encode_invoke(NULL, 0, UINT64_MAX, 0xffffffffu, 7, NULL, 0, 1), n);

    /* Reject: success=false carries no reply_proto */
    n = tg_ipc_encode_reply(buf, sizeof buf, 5, 0, 0, (const uint8_t *)"xx", 2);
    assert_int_equal(tg_frame_scan(buf, n, &fi), 0);
    assert_int_equal(fi.success, 0);
    assert_int_equal(fi.has_payload, 0);

    n = tg_ipc_encode_request_error(buf, sizeof buf, 9, "unknown request");
    assert_int_equal(tg_frame_scan(buf, n, &fi), 0);
    assert_int_equal(fi.msg, TG_MSG_REQUEST_ERROR);
    assert_int_equal(fi.request_id, 9);
    assert_int_equal(fi.msg_len, 2 + strlen("unknown request"));
    assert_memory_equal(fi.msg_data + 2, "unknown request", strlen("unknown request"));
}

/* Compares two scanned frames field by field (payload and method lists too). */
static void assert_same_frame(const struct tg_frame_info *a, const struct tg_frame_info *b, const char *what)
{
    if (a->request_id != b->request_id || a->msg != b->msg || a->service_id != b->service_id ||
        a->method_id != b->method_id || a->drop_reply != b->drop_reply || a->success != b->success ||
        a->has_more != b->has_more || a->has_payload != b->has_payload || a->payload_len != b->payload_len ||
        a->service_name_len != b->service_name_len)
        fail_msg("%s: re-encoded frame has different fields", what);
    if (a->payload_len && memcmp(a->payload, b->payload, a->payload_len) != 0)
        fail_msg("%s: re-encoded payload differs", what);
    if (a->service_name_len && memcmp(a->service_name, b->service_name, a->service_name_len) != 0)
        fail_msg("%s: re-encoded service name differs", what);
    if (a->msg == TG_MSG_BIND_SERVICE_REPLY) {
        struct got_methods ga = {.n = 0}, gb = {.n = 0};
        int oka, okb;
        uint32_t sa, sb;
        assert_int_equal(tg_ipc_parse_bind_reply(a->msg_data, a->msg_len, &oka, &sa, collect_method, &ga), 0);
        assert_int_equal(tg_ipc_parse_bind_reply(b->msg_data, b->msg_len, &okb, &sb, collect_method, &gb), 0);
        if (oka != okb || sa != sb || ga.n != gb.n)
            fail_msg("%s: re-encoded bind reply differs", what);
        for (size_t m = 0; m < ga.n; m++)
            if (ga.m[m].id != gb.m[m].id || strcmp(ga.m[m].name, gb.m[m].name) != 0)
                fail_msg("%s: re-encoded method %zu differs", what, m);
    }
}

/* Re-encoding every bind, bind reply, invoke and reply of the recordings from
 * the scanned fields gives a frame Perfetto would read the same way; where
 * Perfetto used minimal varints (it pads the lengths of big nested messages
 * to 4 bytes), the bytes are identical, so a bridge may re-encode small frames
 * without changing the wire. */
static void test_reencode_recordings(void **state)
{
    (void)state;
    struct recs rs;
    NEED_RECORDINGS(&rs);
    size_t checked = 0, identical = 0;
    uint8_t *buf = malloc(TG_FRAME_MAX_DEFAULT);
    assert_non_null(buf);
    for (size_t i = 0; i < rs.n; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(rs.paths[i], &rec), 0);
        for (int d = 0; d < 2; d++) {
            tg_frame_reader *r = tg_frame_reader_new(0);
            tg_frame_reader_feed(r, rec.stream[d], rec.stream_len[d]);
            const uint8_t *body;
            size_t len;
            while (tg_frame_reader_next(r, &body, &len) == TG_FRAME_READY) {
                struct tg_frame_info fi, fo;
                assert_int_equal(tg_frame_scan(body, len, &fi), 0);
                size_t n = 0;
                switch (fi.msg) {
                case TG_MSG_BIND_SERVICE: {
                    char name[128];
                    assert_true(fi.service_name_len < sizeof name);
                    memcpy(name, fi.service_name, fi.service_name_len);
                    name[fi.service_name_len] = 0;
                    n = tg_ipc_encode_bind(buf, TG_FRAME_MAX_DEFAULT, fi.request_id, name);
                    break;
                }
                case TG_MSG_BIND_SERVICE_REPLY: {
                    struct got_methods g = {.n = 0};
                    int ok;
                    uint32_t sid;
                    assert_int_equal(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, collect_method, &g),
                                     0);
                    struct tg_ipc_method_info mi[32];
                    for (size_t m = 0; m < g.n; m++)
                        mi[m] = (struct tg_ipc_method_info){g.m[m].id, g.m[m].name};
                    n = tg_ipc_encode_bind_reply(buf, TG_FRAME_MAX_DEFAULT, fi.request_id, ok, sid, mi, g.n);
                    break;
                }
                case TG_MSG_INVOKE_METHOD:
                    n = tg_ipc_encode_invoke(buf, TG_FRAME_MAX_DEFAULT, fi.request_id, fi.service_id, fi.method_id,
                                             fi.payload, fi.payload_len, fi.drop_reply);
                    break;
                case TG_MSG_INVOKE_METHOD_REPLY:
                    n = tg_ipc_encode_reply(buf, TG_FRAME_MAX_DEFAULT, fi.request_id, fi.success, fi.has_more,
                                            fi.payload, fi.payload_len);
                    break;
                default:
                    continue;
                }
                char what[200];
                snprintf(what, sizeof what, "%s dir %d request %llu msg %d", rec.name, d,
                         (unsigned long long)fi.request_id, (int)fi.msg);
                if (n == 0 || n > len)
                    fail_msg("%s: re-encoded to %zu bytes, Perfetto used %zu", what, n, len);
                assert_int_equal(tg_frame_scan(buf, n, &fo), 0);
                assert_same_frame(&fi, &fo, what);
                if (n == len) {
                    if (memcmp(buf, body, len) != 0)
                        fail_msg("%s: same size as Perfetto's frame but different bytes", what);
                    identical++;
                }
                checked++;
            }
            tg_frame_reader_free(r);
        }
        tg_recording_free(&rec);
    }
    free(buf);
    assert_true(checked >= 100);
    assert_true(identical >= 70); /* every small frame */
    tg_test_free_list(rs.paths, rs.n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recordings_match_txt),
        cmocka_unit_test(test_query_service_state_first_frames),
        cmocka_unit_test(test_every_split_reader),
        cmocka_unit_test(test_every_split_peek),
        cmocka_unit_test(test_random_splits),
        cmocka_unit_test(test_recorded_read_boundaries),
        cmocka_unit_test(test_oversize),
        cmocka_unit_test(test_zero_length_skipped),
        cmocka_unit_test(test_garbage_then_good),
        cmocka_unit_test(test_scan_worked_bytes),
        cmocka_unit_test(test_reencode_recordings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
