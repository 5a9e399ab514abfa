/* tracegated.c: the tracegate daemon: the embedded tracing service plus the gateway listeners. */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tracegate/log.h"
#include "tracegate/service.h"

#define LOG "tracegated"

struct daemon_opts {
    const char *producer_socks;
    const char *consumer_socks;
    unsigned producer_mode, consumer_mode;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tracegated [options]\n\n"
            "Runs a traced-compatible tracing service on Perfetto's producer and consumer sockets.\n\n"
            "options:\n"
            "  --producer-socket ADDRS  producer socket(s), comma-separated (default: Perfetto's,\n"
            "                           or $PERFETTO_PRODUCER_SOCK_NAME); host:port = TCP\n"
            "  --consumer-socket ADDRS  consumer socket(s) (default: Perfetto's or $PERFETTO_CONSUMER_SOCK_NAME)\n"
            "  --producer-socket-mode OCTAL   permissions of UNIX producer sockets (default 0666)\n"
            "  --consumer-socket-mode OCTAL   permissions of UNIX consumer sockets (default 0600)\n"
            "  --log-level LEVEL        debug, info, warn or error (default info)\n"
            "  --log-format FORMAT      text or json (default text)\n"
            "  --syslog                 log to syslog instead of stderr\n"
            "  -h, --help               this help\n"
            "  --version                print the version\n");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    tg_info(LOG, "received %s, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"producer-socket", required_argument, NULL, 'p'},
        {"consumer-socket", required_argument, NULL, 'c'},
        {"producer-socket-mode", required_argument, NULL, 'P'},
        {"consumer-socket-mode", required_argument, NULL, 'M'},
        {"log-level", required_argument, NULL, 'l'},
        {"log-format", required_argument, NULL, 'f'},
        {"syslog", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct daemon_opts o;
    memset(&o, 0, sizeof o);
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p': o.producer_socks = optarg; break;
        case 'c': o.consumer_socks = optarg; break;
        case 'P': o.producer_mode = (unsigned)strtoul(optarg, NULL, 8); break;
        case 'M': o.consumer_mode = (unsigned)strtoul(optarg, NULL, 8); break;
        case 'l': {
            int lv = tg_log_level_from_string(optarg);
            if (lv < 0) {
                fprintf(stderr, "tracegated: unknown log level '%s'\n", optarg);
                return 2;
            }
            tg_log_set_level((enum tg_log_level)lv);
            break;
        }
        case 'f':
            if (strcmp(optarg, "json") == 0)
                tg_log_set_format(TG_LOG_JSON);
            else if (strcmp(optarg, "text") == 0)
                tg_log_set_format(TG_LOG_TEXT);
            else {
                fprintf(stderr, "tracegated: unknown log format '%s'\n", optarg);
                return 2;
            }
            break;
        case 's': tg_log_use_syslog("tracegated"); break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tracegated %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tracegated: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    struct event_base *base = event_base_new();
    if (!base) {
        fprintf(stderr, "tracegated: cannot create the event loop\n");
        return 1;
    }
    char def_prod[512], def_cons[512];
    tg_service_default_sockets(def_prod, sizeof def_prod, def_cons, sizeof def_cons);
    struct tg_service_opts so = {
        .producer_socks = o.producer_socks ? o.producer_socks : def_prod,
        .consumer_socks = o.consumer_socks ? o.consumer_socks : def_cons,
        .producer_sock_mode = o.producer_mode,
        .consumer_sock_mode = o.consumer_mode,
    };
    char err[512];
    tg_service *svc = tg_service_new(base, &so, err, sizeof err);
    if (!svc) {
        tg_error(LOG, "cannot start the tracing service: %s", err);
        event_base_free(base);
        return 1;
    }
    tg_info(LOG, "tracegate %s: producer socket %s, consumer socket %s", PACKAGE_VERSION, so.producer_socks,
            so.consumer_socks);

    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_base_dispatch(base);

    event_free(sigterm);
    event_free(sigint);
    tg_service_free(svc);
    event_base_free(base);
    tg_info(LOG, "stopped");
    return 0;
}
