/* tracectl.c: command-line client for tracegate and Perfetto services: option parsing and command dispatch. */
#include "tracectl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "base/malloc_tune.h"
#include "tracegate/log.h"
#include "tracegate/service.h"

struct command {
    const char *name;
    int (*fn)(const struct tc_opts *opts, int argc, char **argv);
    const char *usage;
    int takes_url; /* the first non-option argument is the endpoint URL */
};

static const struct command k_commands[] = {
    {"query", tc_cmd_query, "query [URL]            show producers, data sources, sessions and capabilities", 1},
    {"record", tc_cmd_record,
     "record [URL] [-c CONFIG] [--duration 10s] [--buffer 32mb] [--ds NAME]... [--fill ring|discard]\n"
     "                         [-o FILE] [--detach KEY] [--no-progress] [--no-resume]\n"
     "                         [--nodes A,B|--all] [--all-machines] [--spans FILE|@fleet]...\n"
     "                         record a trace into a .pftrace file (default trace.pftrace)", 1},
    {"attach", tc_cmd_attach, "attach [URL] KEY [-o FILE] [--stop]\n"
                              "                         collect a session started with record --detach KEY", 1},
    {"clone", tc_cmd_clone, "clone [URL] SESSION [-o FILE]\n"
                            "                         snapshot a running session (id or unique name) into a file", 1},
    {"nodes", tc_cmd_nodes, "nodes [URL] [--adb]    the nodes a tracegate gateway reaches: state, machine id, RTT,\n"
                            "                         clock offset, bytes, channels, since; --adb: each node's\n"
                            "                         ADB server and the devices it sees (adb role)", 1},
    {"spans", tc_cmd_spans, "spans [URL] [--node NAME|--nodes A,B|--all] [-o FILE.ndjson] [--cursor FILE]\n"
                            "                         the recent OnePath spans of nodes (spans role), as NDJSON", 1},
    {"merge", tc_cmd_merge, "merge TRACE SPANS.ndjson... -o OUT [--machine HOST=ID]... [--host-node NAME]\n"
                            "                         stitch OnePath spans into a trace (slices, flows, per-machine clocks)", 0},
    {"stats", tc_cmd_stats, "stats [URL] [--kcdata FILE]\n"
                            "                         a gateway's counters and its nodes; --kcdata writes them as a\n"
                            "                         KCDATA buffer (`tracectl kcdata FILE` prints it)", 1},
    {"dump", tc_cmd_dump, "dump FILE [--raw] [--summary]\n"
                          "                         print the packets of a .pftrace file (or only their totals)", 0},
    {"kcdata", tc_cmd_kcdata, "kcdata FILE [--json]   print a KCDATA buffer (node descriptor, stats snapshot, ...)", 0},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tracectl [options] COMMAND [args]\n\n"
            "Talks Perfetto's consumer protocol to tracegated, traced or a remote node.\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(out, "  %s\n", k_commands[i].usage);
    fprintf(out, "\nURL forms: unix:PATH, PATH, @abstract, tcp://HOST:PORT, HOST:PORT, tls://HOST:PORT,\n"
                 "           ws://HOST:PORT/traced, wss://HOST:PORT/traced\n"
                 "           (default: the local consumer socket, $PERFETTO_CONSUMER_SOCK_NAME; for nodes,\n"
                 "           spans, stats, record --nodes/--all and --node: the local gateway at\n"
                 "           " TC_DEFAULT_GATEWAY ")\n\n"
                 "options:\n"
                 "  --cacert FILE     CA certificate(s) to verify a tls:// or wss:// server\n"
                 "  --cert FILE       client certificate (mTLS)\n"
                 "  --key FILE        client private key (mTLS)\n"
                 "  --token TOKEN     bearer token (or $TRACEGATE_TOKEN): a WebSocket subprotocol on ws:// and\n"
                 "                    wss://, TracegateAuth in-band on tcp:// and tls://\n"
                 "  --token-in-url    ws://, wss://: send a token that does not fit a subprotocol as ?token=\n"
                 "                    (proxies and access logs may record it; `tracegated --gen-token` makes\n"
                 "                    tokens that fit)\n"
                 "  --node NAME       the command is for node NAME, reached through the gateway's links\n"
                 "                    (any command that talks to a service; see `tracectl nodes`); without\n"
                 "                    a URL, the local gateway at " TC_DEFAULT_GATEWAY "\n"
                 "  --timeout MS      connect/bind timeout (default 10000)\n"
                 "  -v, --verbose     debug logging\n"
                 "  -h, --help        this help\n"
                 "  --version         print the version\n\n"
                 "Against a broken or hostile server: an answer to one call (query, stats, nodes, spans,\n"
                 "attach, clone) over 32 MiB in all its parts is refused; a ReadBuffers (record, attach)\n"
                 "that sends more than twice the session's buffers plus 16 MiB is stopped there (the file\n"
                 "keeps what came, reported incomplete, exit 1; in a federated session the gateway bounds\n"
                 "each node's part so), and one silent for 60 s is given up. Connecting and binding (--timeout)\n"
                 "and every call (10 s to 60 s) have deadlines; a session that does not end 30 s after its\n"
                 "duration is stopped, and given up 30 s after that.\n");
}

const char *tc_url_then_operand(const struct tc_opts *opts, int argc, char **argv, const char *cmd,
                                const char *what, struct tc_opts *eo)
{
    *eo = *opts;
    int left = argc - optind;
    const char *operand = NULL;
    if (left > (opts->endpoint_defaulted ? 2 : 1)) {
        fprintf(stderr, "tracectl %s: too many arguments\n", cmd);
        return NULL;
    }
    if (left == 1) {
        operand = argv[optind++];
    } else if (left == 2) {
        eo->endpoint = argv[optind++]; /* options came first: `cmd -o F URL OPERAND` */
        eo->endpoint_defaulted = 0;
        operand = argv[optind++];
    } else if (!opts->endpoint_defaulted) {
        operand = opts->endpoint; /* `cmd OPERAND`: what the dispatcher took for the URL */
        eo->endpoint = opts->default_endpoint;
        eo->endpoint_defaulted = 1;
    }
    if (!operand || !operand[0]) {
        fprintf(stderr, "tracectl %s: missing %s\n", cmd, what);
        return NULL;
    }
    return operand;
}

int main(int argc, char **argv)
{
    tg_malloc_tune_for_streams(); /* base/malloc_tune.h */
    static const struct option longopts[] = {
        {"cacert", required_argument, NULL, 'A'}, {"cert", required_argument, NULL, 'C'},
        {"key", required_argument, NULL, 'K'},    {"token", required_argument, NULL, 'T'},
        {"timeout", required_argument, NULL, 't'}, {"verbose", no_argument, NULL, 'v'},
        {"token-in-url", no_argument, NULL, 'U'}, {"node", required_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct tc_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.timeout_ms = 10000;
    opts.creds.token = getenv("TRACEGATE_TOKEN");
    int c;
    /* '+' stops at the command name; command options are parsed by each command */
    while ((c = getopt_long(argc, argv, "+vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'A': opts.creds.cacert = optarg; break;
        case 'C': opts.creds.cert = optarg; break;
        case 'K': opts.creds.key = optarg; break;
        case 'T': opts.creds.token = optarg; break;
        case 'U': opts.creds.token_in_url = 1; break;
        case 'N': opts.node = optarg; break;
        case 't': opts.timeout_ms = atoi(optarg); break;
        case 'v': tg_log_set_level(TG_LOG_DEBUG); break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tracectl %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    int cargc = argc - optind;
    char **cargv = argv + optind;
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        if (strcmp(cmd, k_commands[i].name) != 0)
            continue;
        char def_prod[256], def_cons[256];
        tg_service_default_sockets(def_prod, sizeof def_prod, def_cons, sizeof def_cons);
        /* the first non-option argument after the command is the endpoint URL */
        opts.endpoint = def_cons;
        opts.endpoint_defaulted = 1;
        if (k_commands[i].takes_url && cargc > 1 && cargv[1][0] != '-') {
            opts.endpoint_defaulted = 0;
            opts.endpoint = cargv[1];
            cargv[1] = cargv[0];
            cargv++;
            cargc--;
        }
        optind = 1;
        opts.default_endpoint = opts.node ? TC_DEFAULT_GATEWAY : def_cons;
        if (opts.endpoint_defaulted)
            opts.endpoint = opts.default_endpoint;
        return k_commands[i].fn(&opts, cargc, cargv);
    }
    fprintf(stderr, "tracectl: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
