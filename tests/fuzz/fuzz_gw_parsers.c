/* fuzz_gw_parsers.c: libFuzzer target for tracegated's text parsers: the config file, the token
 * file, --listen specs, endpoint URLs and the HTTP/WebSocket request helpers (route, subprotocol
 * header, static path, Host rule, Authorization header). The first byte picks the parser; the rest
 * is its input. Host names never reach a resolver: the harness makes every lookup numeric-only
 * (real lookups made the target ~20x slower and sent fuzzed names to DNS servers). */
#include <dlfcn.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/endpoint.h"
#include "gw_auth.h"
#include "gw_config.h"
#include "gw_ws_policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Replaces libc's for this process (the libraries under test call this one); the real lookup runs
 * with AI_NUMERICHOST. */
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
    static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
    if (!real)
        return EAI_FAIL;
    struct addrinfo h;
    if (hints)
        h = *hints;
    else
        memset(&h, 0, sizeof h);
    h.ai_flags |= AI_NUMERICHOST;
    return real(node, service, &h, res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0'; /* string parsers get a NUL-terminated copy */
    size_t len = size - 1;
    char err[512], buf[256];
    switch (data[0] % 7) {
    case 0: {
        struct tg_gw_config c;
        tg_gw_config_init(&c);
        if (tg_gw_config_parse_text(&c, text, len, "fuzz", err, sizeof err) == 0)
            tg_gw_config_validate(&c, err, sizeof err);
        tg_gw_config_free(&c);
        break;
    }
    case 1: {
        struct tg_gw_tokens *t = NULL;
        if (tg_gw_tokens_parse(text, len, "fuzz", &t, err, sizeof err) == 0 && t) {
            tg_gw_tokens_lookup(t, text, strlen(text), buf, sizeof buf);
            tg_gw_tokens_free(t);
        }
        break;
    }
    case 2: {
        struct tg_gw_listen_spec spec;
        memset(&spec, 0, sizeof spec);
        tg_gw_listen_parse(text, &spec, err, sizeof err);
        break;
    }
    case 3: {
        struct tg_endpoint ep;
        tg_endpoint_parse(text, &ep, err, sizeof err);
        break;
    }
    case 4: {
        const char *why = NULL;
        tg_ws_parse_protocols(text, buf, sizeof buf, &why);
        break;
    }
    case 5: {
        static const char *const hosts[] = {"gw.example.test", "[fd00::5]"};
        struct tg_gw_ws_config c;
        memset(&c, 0, sizeof c);
        c.bind_host = "10.0.0.5";
        c.http_hosts = hosts;
        c.n_http_hosts = 2;
        tg_ws_host_allowed(text, &c);
        size_t tl = 0;
        const char *t = tg_ws_bearer_token(text, &tl);
        if (t && (tl == 0 || t + tl > text + len))
            __builtin_trap();
        /* a token in any encoding against a table (base64/base64url alternates) */
        static const char table[] = "a observer 0000000000000000000000000000000000000000000000000000000000000000\n";
        struct tg_gw_tokens *tt = NULL;
        if (tg_gw_tokens_parse(table, sizeof table - 1, "fuzz", &tt, err, sizeof err) == 0) {
            if (tg_gw_tokens_lookup(tt, text, strlen(text), buf, sizeof buf) != 0)
                __builtin_trap(); /* nothing hashes to all zeros */
            tg_gw_tokens_free(tt);
        }
        break;
    }
    default:
        tg_ws_route_of(text, buf, sizeof buf);
        tg_ws_static_path_ok(text);
        tg_ws_mime_type(text);
        break;
    }
    free(text);
    return 0;
}
