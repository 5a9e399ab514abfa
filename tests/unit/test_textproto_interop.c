/* test_textproto_interop.c: the text format of real Perfetto traffic.
 * ../shared/interop/recordings/X.txt holds, for every IPC frame of X.bin, the
 * IPCFrame in protobuf text format and the method's request/response message
 * decoded the same way (printed by protobuf's own printer). For every frame:
 *  - the reader turns the IPCFrame text into the recorded frame (compared after
 *    a protobuf-c unpack/pack canonicalization, as field order on the wire is
 *    the writer's choice), and the inner message text into args/reply_proto;
 *  - the printer prints the recorded frame and inner message exactly as the
 *    recording shows them.
 * Skipped when the shared directory is absent. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "commit_data_request.pb-c.h"
#include "consumer_port.pb-c.h"
#include "ipc_frame.pb-c.h"
#include "producer_port.pb-c.h"
#include "relay_port.pb-c.h"
#include "tracegate/textproto.h"

#ifndef TG_SHARED_DIR
#define TG_SHARED_DIR "../shared"
#endif

static const ProtobufCMessageDescriptor *const k_method_types[] = {
    &perfetto__protos__enable_tracing_request__descriptor,
    &perfetto__protos__enable_tracing_response__descriptor,
    &perfetto__protos__disable_tracing_request__descriptor,
    &perfetto__protos__disable_tracing_response__descriptor,
    &perfetto__protos__read_buffers_request__descriptor,
    &perfetto__protos__read_buffers_response__descriptor,
    &perfetto__protos__flush_request__descriptor,
    &perfetto__protos__flush_response__descriptor,
    &perfetto__protos__detach_request__descriptor,
    &perfetto__protos__detach_response__descriptor,
    &perfetto__protos__attach_request__descriptor,
    &perfetto__protos__attach_response__descriptor,
    &perfetto__protos__query_service_state_request__descriptor,
    &perfetto__protos__query_service_state_response__descriptor,
    &perfetto__protos__initialize_connection_request__descriptor,
    &perfetto__protos__initialize_connection_response__descriptor,
    &perfetto__protos__register_data_source_request__descriptor,
    &perfetto__protos__register_data_source_response__descriptor,
    &perfetto__protos__register_trace_writer_request__descriptor,
    &perfetto__protos__commit_data_request__descriptor,
    &perfetto__protos__notify_data_source_started_request__descriptor,
    &perfetto__protos__notify_data_source_stopped_request__descriptor,
    &perfetto__protos__get_async_command_request__descriptor,
    &perfetto__protos__get_async_command_response__descriptor,
    &perfetto__protos__init_relay_request__descriptor,
    &perfetto__protos__init_relay_response__descriptor,
    &perfetto__protos__sync_clock_request__descriptor,
    &perfetto__protos__sync_clock_response__descriptor,
};

struct bytes {
    uint8_t *p;
    size_t n, cap;
};

static void bytes_add(struct bytes *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static int read_file(const char *path, struct bytes *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        bytes_add(out, buf, n);
    fclose(f);
    return 0;
}

/* One direction's frames, reassembled from the record stream. */
struct frames {
    struct bytes stream;
    size_t pos; /* next unread frame header */
};

static int next_frame(struct frames *fr, const uint8_t **p, size_t *n)
{
    struct bytes *s = &fr->stream;
    if (fr->pos + 4 > s->n)
        return -1;
    uint32_t len = (uint32_t)s->p[fr->pos] | (uint32_t)s->p[fr->pos + 1] << 8 | (uint32_t)s->p[fr->pos + 2] << 16 |
                   (uint32_t)s->p[fr->pos + 3] << 24;
    if (fr->pos + 4 + len > s->n)
        return -1;
    *p = s->p + fr->pos + 4;
    *n = len;
    fr->pos += 4 + (size_t)len;
    return 0;
}

/* unpack + pack: the canonical protobuf-c encoding of a message */
static uint8_t *canonical(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t n, size_t *out_n)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, n, p);
    if (!m)
        return NULL;
    *out_n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*out_n + 1);
    assert_non_null(b);
    protobuf_c_message_pack(m, b);
    protobuf_c_message_free_unpacked(m, NULL);
    return b;
}

static const ProtobufCMessageDescriptor *method_type(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof k_method_types / sizeof k_method_types[0]; i++)
        if (strlen(k_method_types[i]->short_name) == n && memcmp(k_method_types[i]->short_name, name, n) == 0)
            return k_method_types[i];
    return NULL;
}

/* Checks that text parses to a message canonically equal to the wire bytes,
 * and that printing the wire bytes at indent gives back text exactly. */
static void check_message(const char *where, const ProtobufCMessageDescriptor *desc, const char *text, size_t text_n,
                          const uint8_t *wire, size_t wire_n, int indent)
{
    char err[256];
    uint8_t *mine = NULL;
    size_t mine_n = 0;
    if (tg_textproto_to_binary(desc, text, text_n, &mine, &mine_n, err, sizeof err) != 0)
        fail_msg("%s: %s does not parse: %s", where, desc->name, err);
    size_t want_n = 0, got_n = 0;
    uint8_t *want = canonical(desc, wire, wire_n, &want_n);
    uint8_t *got = canonical(desc, mine, mine_n, &got_n);
    if (!want)
        fail_msg("%s: recorded %s does not decode", where, desc->name);
    assert_non_null(got);
    if (want_n != got_n || memcmp(want, got, want_n) != 0)
        fail_msg("%s: parsed %s differs from the recorded bytes", where, desc->name);
    free(want);
    free(got);
    free(mine);

    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, wire_n, wire);
    assert_non_null(m);
    char *printed = tg_textproto_print(m, indent);
    assert_non_null(printed);
    if (strlen(printed) != text_n || memcmp(printed, text, text_n) != 0) {
        size_t i = 0;
        while (i < text_n && printed[i] == text[i])
            i++;
        fail_msg("%s: printed %s differs from the recording at byte %zu:\n--- printed ---\n%.300s\n--- recorded "
                 "---\n%.300s",
                 where, desc->name, i, printed + (i > 100 ? i - 100 : 0), text + (i > 100 ? i - 100 : 0));
    }
    free(printed);
    protobuf_c_message_free_unpacked(m, NULL);
}

/* Returns the number of frames checked. */
static size_t check_recording(const char *dir, const char *base)
{
    char *path = NULL;
    struct bytes bin = {0}, txt = {0};
    assert_true(asprintf(&path, "%s/%s.bin", dir, base) > 0);
    int r = read_file(path, &bin);
    free(path);
    if (r != 0)
        return 0;
    assert_true(asprintf(&path, "%s/%s.txt", dir, base) > 0);
    r = read_file(path, &txt);
    free(path);
    if (r != 0) { /* a .bin without its decoded .txt */
        free(bin.p);
        return 0;
    }
    bytes_add(&txt, "", 1); /* NUL-terminate for the line scanner */

    struct frames fr[2];
    memset(fr, 0, sizeof fr);
    for (size_t pos = 0; pos + 6 <= bin.n;) {
        uint8_t d = bin.p[pos];
        uint32_t len = (uint32_t)bin.p[pos + 2] | (uint32_t)bin.p[pos + 3] << 8 | (uint32_t)bin.p[pos + 4] << 16 |
                       (uint32_t)bin.p[pos + 5] << 24;
        assert_true(pos + 6 + len <= bin.n);
        if (d < 2)
            bytes_add(&fr[d].stream, bin.p + pos + 6, len);
        pos += 6 + (size_t)len;
    }

    size_t checked = 0;
    const char *s = (const char *)txt.p;
    const char *hdr = strstr(s, "=== ");
    while (hdr) {
        const char *next = strstr(hdr + 4, "\n=== ");
        const char *end = next ? next + 1 : s + txt.n - 1;
        const char *note = strstr(hdr, "\n(smb snapshots"); /* trailing summary line */
        if (note && note < end)
            end = note + 1;
        int d = strncmp(hdr, "=== C->S", 8) == 0 ? 0 : 1;
        size_t len = strtoul(strstr(hdr, "len=") + 4, NULL, 10);
        const char *body = strchr(hdr, '\n') + 1;
        /* the frame text runs up to the "  ->"/"  <-" line or the blank line closing the block */
        const char *arrow = strstr(body, d == 0 ? "\n  -> " : "\n  <- ");
        if (arrow && arrow >= end)
            arrow = NULL;
        const char *frame_end = arrow ? arrow + 1 : end;
        while (frame_end > body && frame_end[-1] == '\n' && frame_end - 1 > body && frame_end[-2] == '\n')
            frame_end--; /* keep one trailing newline */

        const uint8_t *wire = NULL;
        size_t wire_n = 0;
        char where[512];
        snprintf(where, sizeof where, "%s frame %zu (%s)", base, checked + 1, d == 0 ? "C->S" : "S->C");
        if (next_frame(&fr[d], &wire, &wire_n) != 0)
            fail_msg("%s: missing in the .bin", where);
        assert_int_equal(wire_n, len);
        check_message(where, &perfetto__protos__ipcframe__descriptor, body, (size_t)(frame_end - body), wire, wire_n,
                      0);

        if (arrow) {
            /* "  -> Method(RequestType)" or "  <- ResponseType", then the message at indent 4 */
            const char *line = arrow + 1 + 5;
            const char *eol = strchr(line, '\n');
            const char *tname = line, *tend = eol;
            const char *paren = memchr(line, '(', (size_t)(eol - line));
            if (paren) {
                tname = paren + 1;
                tend = memchr(tname, ')', (size_t)(eol - tname));
            }
            const ProtobufCMessageDescriptor *desc = method_type(tname, (size_t)(tend - tname));
            if (!desc)
                fail_msg("%s: no descriptor for %.*s", where, (int)(tend - tname), tname);
            const char *inner = eol + 1;
            const char *inner_end = end;
            while (inner_end > inner && inner_end[-1] == '\n')
                inner_end--;
            if (inner_end > inner)
                inner_end++; /* the last line's newline */
            Perfetto__Protos__IPCFrame *f =
                (Perfetto__Protos__IPCFrame *)protobuf_c_message_unpack(&perfetto__protos__ipcframe__descriptor, NULL,
                                                                        wire_n, wire);
            assert_non_null(f);
            const ProtobufCBinaryData *payload = NULL;
            if (f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD)
                payload = &f->msg_invoke_method->args_proto;
            else if (f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY)
                payload = &f->msg_invoke_method_reply->reply_proto;
            assert_non_null(payload);
            strncat(where, " payload", sizeof where - strlen(where) - 1);
            check_message(where, desc, inner, (size_t)(inner_end - inner), payload->data, payload->len, 4);
            protobuf_c_message_free_unpacked(&f->base, NULL);
        }
        checked++;
        hdr = next ? next + 1 : NULL;
    }
    free(bin.p);
    free(txt.p);
    free(fr[0].stream.p);
    free(fr[1].stream.p);
    return checked;
}

static void test_recordings(void **state)
{
    (void)state;
    const char *shared = getenv("TG_SHARED_DIR");
    if (!shared || !*shared)
        shared = TG_SHARED_DIR;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/interop/recordings", shared);
    DIR *dh = opendir(dir);
    if (!dh) {
        print_message("no interop recordings at %s\n", dir);
        skip();
    }
    size_t files = 0, frames = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 4, ".bin") != 0)
            continue;
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(n - 4), de->d_name);
        size_t k = check_recording(dir, base);
        if (k) {
            files++;
            frames += k;
        }
    }
    closedir(dh);
    print_message("checked %zu frames in %zu recordings\n", frames, files);
    assert_true(files > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recordings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
