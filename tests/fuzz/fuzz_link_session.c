/* fuzz_link_session.c: fuzz target for the acceptor side of a gateway link: the input is what a
 * dialing peer sends (HTTP/2 client bytes: preface, SETTINGS, the control stream's extended
 * CONNECT and messages, channel streams and their records). It goes through a socketpair into a
 * real link connection (tg_fleet_accept_link_fd: transport, nghttp2 server session, control stream,
 * authentication by bearer token, hello, clock sync, node lists, channels handed to the gateway
 * core), the event loop runs until everything is processed; then the peer hangs up and the fleet
 * is freed, or (inputs of odd length) the fleet is freed first, as when tracegated stops with a
 * link open. Must never crash, leak, or trip ASan/UBSan.
 *
 * The gateway (a token file with "fuzz-link-token", named "edge" and holding the link role; no
 * upstream service) is made once; each input gets a fresh fleet (node "hub"). The peer's bytes
 * are written to the socket as they are; the first byte of the input is not special. Seeds:
 * corpus/fuzz_link_session (made by make_link_seeds.c with nghttp2's client). TG_FUZZ_VERBOSE=1
 * shows the gateway's log. */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_auth.h"
#include "gw_config.h"
#include "gw_core.h"
#include "tracegate/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_LINK_TOKEN "fuzz-link-token"
#define MAX_SPINS 20000 /* loop iterations per input: a safety net against a livelock, never reached */

static struct event_base *g_base;
static struct tg_gw *g_gw;
static struct tg_gw_config g_cfg;

static void init_once(void)
{
    if (g_base)
        return;
    signal(SIGPIPE, SIG_IGN);
    const char *v = getenv("TG_FUZZ_VERBOSE");
    tg_log_set_level(v && *v == '1' ? TG_LOG_DEBUG : TG_LOG_ERROR);
    g_base = event_base_new();
    if (!g_base)
        __builtin_trap();
    /* the token file is read by tg_gw_new and removed right after */
    const char *tmp = getenv("TMPDIR");
    char dir[512], tokens[600], nosock[600], line[200], hash[65], err[512];
    snprintf(dir, sizeof dir, "%s/tg-fuzz-link-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        __builtin_trap();
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    snprintf(nosock, sizeof nosock, "%s/no-service.sock", dir);
    tg_gw_sha256_hex(FUZZ_LINK_TOKEN, strlen(FUZZ_LINK_TOKEN), hash);
    /* a token links only under its own name: the seeds dial as node "edge" */
    int n = snprintf(line, sizeof line, "edge link %s\n", hash);
    FILE *f = fopen(tokens, "w");
    if (!f || fwrite(line, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0)
        __builtin_trap();
    tg_gw_config_init(&g_cfg);
    if (tg_gw_config_set(&g_cfg, "upstream-consumer", nosock, err, sizeof err) != 0 ||
        tg_gw_config_set(&g_cfg, "no-http", NULL, err, sizeof err) != 0 ||
        tg_gw_config_set(&g_cfg, "upstream-probe-interval", "0", err, sizeof err) != 0 ||
        tg_gw_config_set(&g_cfg, "token-file", tokens, err, sizeof err) != 0 ||
        tg_gw_config_validate(&g_cfg, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_link_session: config: %s\n", err);
        __builtin_trap();
    }
    g_gw = tg_gw_new(g_base, &g_cfg, NULL, err, sizeof err);
    if (!g_gw) {
        fprintf(stderr, "fuzz_link_session: tg_gw_new: %s\n", err);
        __builtin_trap();
    }
    unlink(tokens);
    rmdir(dir);
}

/* Bytes the peer wrote that the link has not read yet (0 as well once the link closed its end:
 * a UNIX socket's send queue is what the receiver has not taken). */
static int unread_by_link(int peer_fd)
{
    int n = 0;
    return ioctl(peer_fd, SIOCOUTQ, &n) == 0 ? n : 0;
}

/* Reads and drops what the link sent back. */
static void drain(int fd)
{
    uint8_t buf[16384];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

/* Runs the loop until nothing is ready to run and the link has read everything the peer wrote. */
static void settle(int peer_fd)
{
    for (int i = 0; i < MAX_SPINS; i++) {
        event_base_loop(g_base, EVLOOP_NONBLOCK);
        if (peer_fd >= 0)
            drain(peer_fd);
        if ((peer_fd < 0 || unread_by_link(peer_fd) == 0) &&
            event_base_get_num_events(g_base, EVENT_BASE_COUNT_ACTIVE) == 0)
            return;
    }
    __builtin_trap(); /* still busy after MAX_SPINS rounds: a livelock */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    init_once();
    struct tg_fleet_config fc;
    memset(&fc, 0, sizeof fc);
    fc.node_name = "hub";
    char err[512];
    struct tg_fleet *f = tg_fleet_new(g_base, g_gw, &fc, err, sizeof err);
    if (!f)
        __builtin_trap();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        __builtin_trap();
    if (tg_fleet_accept_link_fd(f, sv[0], err, sizeof err) != 0)
        __builtin_trap();
    settle(sv[1]); /* the transport is up, the server's SETTINGS are out */
    size_t off = 0;
    for (int spins = 0; off < size; spins++) {
        if (spins > MAX_SPINS)
            __builtin_trap();
        ssize_t w = write(sv[1], data + off, size - off);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            break; /* the link closed its end */
        event_base_loop(g_base, EVLOOP_NONBLOCK);
        drain(sv[1]);
    }
    settle(sv[1]);
    if (size & 1) {
        /* the node stops with the link connection still open (tracegated shutting down) */
        tg_fleet_free(f);
        close(sv[1]);
        settle(-1);
    } else {
        /* the peer hangs up: the link goes down (kept for its resume window), then the node stops */
        close(sv[1]);
        settle(-1);
        tg_fleet_free(f);
    }
    settle(-1); /* the gateway sessions of the link's channels end */
    return 0;
}
