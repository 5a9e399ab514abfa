/* fuzz_ws_sink.h: what the two WebSocket filter fuzz targets (fuzz_ws_server_filter.c,
 * fuzz_ws_client_filter.c) share: the owner's end of the filter collecting what it delivers, the
 * loop run until the filter's socket is drained, how finely an input is cut for the second run,
 * and the check that the whole and the cut run delivered the same. Header-only (static); single
 * thread, one event base per run. */
#ifndef TRACEGATE_TESTS_FUZZ_WS_SINK_H
#define TRACEGATE_TESTS_FUZZ_WS_SINK_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <string.h>
#include <sys/ioctl.h>

#include "fuzz_check.h"

/* What the filter gave its owner: the bytes, and whether it ended (EOF) or failed (ERROR). */
struct fws_sink {
    struct evbuffer *got;
    int eof, error;
};

static void fws_on_read(struct bufferevent *bev, void *arg)
{
    evbuffer_add_buffer(((struct fws_sink *)arg)->got, bufferevent_get_input(bev));
}

static void fws_on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct fws_sink *s = arg;
    if (what & BEV_EVENT_EOF)
        s->eof = 1;
    if (what & BEV_EVENT_ERROR)
        s->error = 1;
}

/* Runs the loop until the filter's side has read everything its socket fd holds. */
static void fws_settle(struct event_base *base, int fd)
{
    for (int i = 0; i < 100000; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        int pending = 0;
        if (ioctl(fd, FIONREAD, &pending) != 0 || pending == 0)
            return;
    }
}

/* The write size for the cut run: the input's chunk (0 meaning 1), but at most about 1024 writes:
 * each is a loop turn with several system calls, and a large input cut byte by byte took most of
 * a second under ASan (the regress run: 6 minutes of CI). */
static size_t fws_cut_chunk(size_t len, size_t chunk)
{
    size_t c = chunk ? chunk : 1;
    return len / c > 1024 ? len / 1024 + 1 : c;
}

/* The whole run and the cut run of an input of len bytes ended alike and delivered the same bytes
 * (no more than the input held); frees both sinks' buffers. */
static void fws_check_same(struct fws_sink *whole, struct fws_sink *cut, size_t len)
{
    CHECK(whole->eof || whole->error);
    CHECK(cut->eof || cut->error);
    CHECK(whole->error == cut->error);
    size_t gl = evbuffer_get_length(whole->got);
    CHECK(gl <= len);
    CHECK(gl == evbuffer_get_length(cut->got));
    CHECK(gl == 0 || memcmp(evbuffer_pullup(whole->got, -1), evbuffer_pullup(cut->got, -1), gl) == 0);
    evbuffer_free(whole->got);
    evbuffer_free(cut->got);
}

#endif
