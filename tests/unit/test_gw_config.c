/* test_gw_config.c: tracegated's configuration: config-file syntax (comments, quotes, `=` or
 * space, repeatable keys, errors with line numbers), listener specs, flags overriding the file,
 * and validation (limits, token file, the non-loopback security rule, --insecure). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw.h"
#include "gw_adb_addr.h"
#include "gw_config.h"
#include "tracegate/log.h"

static char g_dir[] = "/tmp/tg-test-gwcfg-XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void parse_ok(struct tg_gw_config *c, const char *text)
{
    char err[512] = "";
    tg_gw_config_init(c);
    if (tg_gw_config_parse_text(c, text, strlen(text), "test.conf", err, sizeof err) != 0)
        fail_msg("unexpected error: %s", err);
}

static void expect_parse_error(const char *text, const char *want)
{
    struct tg_gw_config c;
    char err[512] = "";
    tg_gw_config_init(&c);
    assert_int_equal(tg_gw_config_parse_text(&c, text, strlen(text), "test.conf", err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
    tg_gw_config_free(&c);
}

/* source-prefix6: the IPv6 network a client's per-source limits count (default /64) */
static void test_source_prefix6(void **state)
{
    (void)state;
    struct tg_gw_config c;
    parse_ok(&c, "max-connections = 10\n");
    assert_int_equal(c.limits.source_prefix6, 64);
    tg_gw_config_free(&c);
    parse_ok(&c, "source-prefix6 = 48\n");
    assert_int_equal(c.limits.source_prefix6, 48);
    tg_gw_config_free(&c);
    parse_ok(&c, "source-prefix6 128\n");
    assert_int_equal(c.limits.source_prefix6, 128);
    tg_gw_config_free(&c);
    expect_parse_error("source-prefix6 = 8\n", "not a prefix length from 16 to 128");
    expect_parse_error("source-prefix6 = 129\n", "not a prefix length from 16 to 128");
    expect_parse_error("source-prefix6 = /64\n", "not a prefix length");
}

static void test_file_syntax(void **state)
{
    (void)state;
    struct tg_gw_config c;
    parse_ok(&c, "# a comment\n"
                 "\n"
                 "listen = consumer=tcp://127.0.0.1:7001\n"
                 "listen producer=unix:/tmp/x.sock?mode=0660   # trailing comment\n"
                 "  allow-origin = \"https://example.com\"\n"
                 "local-roles = observer,recorder\n"
                 "insecure = true\n"
                 "no-http\n"
                 "out-soft-grace = 500ms\n"
                 "out-high = 64k\n"
                 "rate = 2.5\n"
                 "log-format json\n"
                 "upstream-consumer = /run/perfetto/traced-consumer.sock\n");
    assert_int_equal(c.n_listen, 2);
    assert_int_equal(c.listen[0].port, TG_GW_PORT_CONSUMER);
    assert_int_equal(c.listen[0].kind, TG_GW_L_TCP);
    assert_string_equal(c.listen[0].address, "127.0.0.1:7001");
    assert_int_equal(c.listen[1].port, TG_GW_PORT_PRODUCER);
    assert_int_equal(c.listen[1].kind, TG_GW_L_UNIX);
    assert_int_equal(c.listen[1].mode, 0660);
    assert_int_equal(c.n_allow_origins, 1);
    assert_string_equal(c.allow_origins[0], "https://example.com");
    assert_int_equal(c.local_roles, TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER);
    assert_true(c.insecure);
    assert_true(c.no_http);
    assert_int_equal(c.limits.soft_grace_ms, 500);
    assert_int_equal(c.limits.out_high, 65536);
    assert_true(c.limits.rate > 2.4 && c.limits.rate < 2.6);
    assert_int_equal(c.log_format, TG_LOG_JSON);
    assert_string_equal(c.upstream_consumer, "/run/perfetto/traced-consumer.sock");
    tg_gw_config_free(&c);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_parse_error("listen = consumer=tcp://127.0.0.1:7001\nbogus = 1\n", "test.conf:2: unknown option 'bogus'");
    expect_parse_error("\n\nout-high = lots\n", "test.conf:3: out-high");
    expect_parse_error("rate =\n", "test.conf:1: 'rate' needs a value");
    expect_parse_error("insecure = maybe\n", "test.conf:1:");
    expect_parse_error("local-roles = root\n", "not a role list");
    expect_parse_error("allow-origin = \"https://x\n", "unterminated quote");
    expect_parse_error("config = other.conf\n", "unknown option 'config'"); /* command line only */
    expect_parse_error("listen = tcp://127.0.0.1:1\n", "PORT=URL");
    expect_parse_error("listen = relay=tcp://127.0.0.1:1\n", "consumer= or producer=");
    expect_parse_error("drain-timeout = 3 days\n", "test.conf:1:");
}

static void expect_listen(const char *spec, int ok, const char *want)
{
    struct tg_gw_listen_spec l;
    char err[512] = "";
    int rc = tg_gw_listen_parse(spec, &l, err, sizeof err);
    if (ok && rc != 0)
        fail_msg("'%s': unexpected error %s", spec, err);
    if (!ok) {
        assert_int_equal(rc, -1);
        if (want && !strstr(err, want))
            fail_msg("'%s': error '%s' does not contain '%s'", spec, err, want);
    }
}

static void test_listen_specs(void **state)
{
    (void)state;
    struct tg_gw_listen_spec l;
    char err[512];
    assert_int_equal(tg_gw_listen_parse("consumer=tls://0.0.0.0:7443?auth=token&roles=observer&max-connections=5",
                                        &l, err, sizeof err),
                     0);
    assert_int_equal(l.kind, TG_GW_L_TLS);
    assert_int_equal(l.auth, TG_GW_LAUTH_TOKEN);
    assert_int_equal(l.roles, TG_GW_ROLE_OBSERVER);
    assert_int_equal(l.max_conns, 5);
    assert_string_equal(l.address, "0.0.0.0:7443");
    assert_int_equal(tg_gw_listen_parse("consumer=127.0.0.1:7001", &l, err, sizeof err), 0);
    assert_int_equal(l.kind, TG_GW_L_TCP);
    assert_int_equal(tg_gw_listen_parse("producer=/run/tracegate/p.sock", &l, err, sizeof err), 0);
    assert_int_equal(l.kind, TG_GW_L_UNIX);
    assert_int_equal(tg_gw_listen_parse("producer=@tg-producer", &l, err, sizeof err), 0);
    assert_int_equal(l.kind, TG_GW_L_UNIX);
    assert_int_equal(tg_gw_listen_parse("consumer=unix:@tg?roles=recorder,observer", &l, err, sizeof err), 0);
    assert_int_equal(l.roles, TG_GW_ROLE_RECORDER | TG_GW_ROLE_OBSERVER);
    assert_int_equal(tg_gw_listen_parse("consumer=tls://[::1]:7443?cert=/c.pem&key=/k.pem&ca=/ca.pem", &l, err,
                                        sizeof err),
                     0);
    assert_string_equal(l.cert, "/c.pem");
    assert_string_equal(l.ca, "/ca.pem");
    expect_listen("consumer", 0, "PORT=URL");
    expect_listen("relay=tcp://127.0.0.1:1", 0, "consumer= or producer=");
    expect_listen("consumer=ws://127.0.0.1:1", 0, "unknown scheme");
    expect_listen("consumer=tcp://127.0.0.1", 0, "HOST:PORT");
    expect_listen("consumer=tcp://127.0.0.1:7001?auth=magic", 0, "auth=");
    expect_listen("consumer=tcp://127.0.0.1:7001?color=blue", 0, "unknown listener option");
    expect_listen("consumer=tcp://127.0.0.1:7001?auth", 0, "key=value");
    expect_listen("consumer=tcp://127.0.0.1:7001?cert=/x", 0, "only apply to tls");
    expect_listen("consumer=tcp://127.0.0.1:7001?roles=", 0, "role list");
    expect_listen("consumer=", 0, NULL);
}

static int validate(struct tg_gw_config *c, char *err, size_t errlen) { return tg_gw_config_validate(c, err, errlen); }

static void test_validate_security(void **state)
{
    (void)state;
    char err[512];
    struct tg_gw_config c;
    /* plain TCP on loopback: fine */
    parse_ok(&c, "no-http\nlisten = consumer=tcp://127.0.0.1:7001\n");
    assert_int_equal(validate(&c, err, sizeof err), 0);
    assert_true(c.listen[0].loopback);
    tg_gw_config_free(&c);
    /* plain TCP off loopback: refused, unless --insecure */
    parse_ok(&c, "no-http\nlisten = consumer=tcp://0.0.0.0:7001\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "non-loopback"));
    assert_non_null(strstr(err, "--insecure"));
    tg_gw_config_set(&c, "insecure", NULL, err, sizeof err);
    assert_int_equal(validate(&c, err, sizeof err), 0);
    tg_gw_config_free(&c);
    /* TLS off loopback without client certificates or tokens: refused */
    char cert[512], key[512];
    snprintf(cert, sizeof cert, "%s", write_file("cert.pem", "not really a certificate\n"));
    snprintf(key, sizeof key, "%s", write_file("key.pem", "not really a key\n"));
    assert_int_equal(chmod(key, 0644), 0);
    char text[2048];
    snprintf(text, sizeof text, "no-http\ntls-cert = %s\ntls-key = %s\nlisten = consumer=tls://0.0.0.0:7443\n", cert,
             key);
    parse_ok(&c, text);
    /* a private key every user can read is refused, with the fix */
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "tls-key"));
    assert_non_null(strstr(err, "every user can read it (chmod o-r"));
    assert_int_equal(chmod(key, 0640), 0);
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "client authentication"));
    /* ... with a token file: accepted */
    const char *tokens =
        write_file("tokens", "ci observer 8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8\n");
    tg_gw_config_set(&c, "token-file", tokens, err, sizeof err);
    assert_int_equal(validate(&c, err, sizeof err), 0);
    /* a CA bundle (who gets in with a certificate) others can write is refused, as is a peer key
     * every user can read and a listener's own key= */
    char ca[512];
    snprintf(ca, sizeof ca, "%s", write_file("ca.pem", "not really a CA\n"));
    assert_int_equal(chmod(ca, 0664), 0);
    tg_gw_config_set(&c, "tls-ca", ca, err, sizeof err);
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "tls-ca"));
    assert_non_null(strstr(err, "writable by its group"));
    assert_int_equal(chmod(ca, 0644), 0);
    assert_int_equal(validate(&c, err, sizeof err), 0);
    tg_gw_config_set(&c, "peer-ca", ca, err, sizeof err);
    tg_gw_config_set(&c, "peer-cert", cert, err, sizeof err);
    tg_gw_config_set(&c, "peer-key", cert, err, sizeof err); /* 0644 */
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "peer-key"));
    assert_non_null(strstr(err, "every user can read it"));
    tg_gw_config_free(&c);
    snprintf(text, sizeof text, "no-http\ntls-ca = %s\nlisten = consumer=tls://0.0.0.0:7443?cert=%s&key=%s\n", ca,
             cert, cert);
    parse_ok(&c, text);
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "key"));
    assert_non_null(strstr(err, "every user can read it"));
    tg_gw_config_free(&c);
    /* auth=token with no tokens */
    parse_ok(&c, "no-http\nlisten = consumer=tcp://127.0.0.1:7001?auth=token\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "auth=token needs --token-file"));
    tg_gw_config_free(&c);
    /* a bad token file is reported */
    const char *bad = write_file("bad-tokens", "ci observer nothex\n");
    snprintf(text, sizeof text, "no-http\ntoken-file = %s\n", bad);
    parse_ok(&c, text);
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, ":1:"));
    tg_gw_config_free(&c);
    /* the HTTP front end off loopback */
    parse_ok(&c, "http = 0.0.0.0:8037\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "http"));
    tg_gw_config_free(&c);
    /* TLS needs a certificate */
    parse_ok(&c, "no-http\nlisten = consumer=tls://127.0.0.1:7443\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "certificate"));
    tg_gw_config_free(&c);
    /* two listeners on one address */
    parse_ok(&c, "no-http\nlisten = consumer=tcp://127.0.0.1:7001\nlisten = producer=127.0.0.1:7001\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "same address"));
    tg_gw_config_free(&c);
    /* mode= on an abstract socket protects nothing: refused (and by --check-config) */
    parse_ok(&c, "no-http\nlisten = consumer=@tg-test?mode=0600\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "mode= has no effect on an abstract socket (@tg-test)"));
    tg_gw_config_free(&c);
    parse_ok(&c, "no-http\nlisten = consumer=unix:@tg-test?mode=0660\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "abstract"));
    tg_gw_config_free(&c);
    /* ... the abstract listener without mode=, and mode= on a path, are fine */
    parse_ok(&c, "no-http\nlisten = consumer=@tg-test\nlisten = producer=unix:/tmp/tg-test.sock?mode=0660\n");
    assert_int_equal(validate(&c, err, sizeof err), 0);
    tg_gw_config_free(&c);
    /* the same for the embedded service's sockets */
    parse_ok(&c, "no-http\nconsumer-socket = /tmp/tg-c.sock, @tg-c\nconsumer-socket-mode = 0600\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "consumer-socket-mode has no effect on the abstract socket @tg-c"));
    tg_gw_config_free(&c);
    parse_ok(&c, "no-http\nproducer-socket = @tg-p\n");
    assert_int_equal(validate(&c, err, sizeof err), 0); /* no mode given: nothing ignored */
    tg_gw_config_free(&c);
    /* inconsistent limits */
    parse_ok(&c, "no-http\nout-low = 2m\n");
    assert_int_equal(validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "out-low"));
    tg_gw_config_free(&c);
}

static void test_args_override_file(void **state)
{
    (void)state;
    const char *conf = write_file("a.conf", "listen = consumer=tcp://127.0.0.1:7001\nrate = 5\nlog-level = warn\n");
    char *argv[] = {"tracegated", "--rate", "7", "--config", (char *)conf, "--listen", "consumer=tcp://127.0.0.1:7002",
                    "--check-config", NULL};
    struct tg_gw_config c;
    struct tg_gw_cli cli;
    char err[512] = "";
    tg_gw_config_init(&c);
    if (tg_gw_config_parse_args(&c, 8, argv, &cli, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_true(cli.check_config);
    assert_false(cli.hash_token);
    assert_true(c.limits.rate > 6.9 && c.limits.rate < 7.1); /* the flag wins although it came first */
    assert_int_equal(c.log_level, TG_LOG_WARN);
    assert_int_equal(c.n_listen, 2); /* repeatable: file + flag */
    assert_string_equal(c.listen[1].address, "127.0.0.1:7002");
    assert_non_null(c.config_file);
    tg_gw_config_free(&c);

    char *bad[] = {"tracegated", "--rate", NULL};
    tg_gw_config_init(&c);
    assert_int_equal(tg_gw_config_parse_args(&c, 2, bad, &cli, err, sizeof err), -1);
    assert_non_null(strstr(err, "rate"));
    tg_gw_config_free(&c);
    char *unknown[] = {"tracegated", "--frobnicate", NULL};
    tg_gw_config_init(&c);
    assert_int_equal(tg_gw_config_parse_args(&c, 2, unknown, &cli, err, sizeof err), -1);
    assert_non_null(strstr(err, "frobnicate"));
    tg_gw_config_free(&c);
    char *missing[] = {"tracegated", "--config", "/nonexistent/tracegated.conf", NULL};
    tg_gw_config_init(&c);
    assert_int_equal(tg_gw_config_parse_args(&c, 3, missing, &cli, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open config file"));
    tg_gw_config_free(&c);
    char *flags[] = {"tracegated", "--insecure", "--no-http", "--hash-token", NULL};
    tg_gw_config_init(&c);
    assert_int_equal(tg_gw_config_parse_args(&c, 4, flags, &cli, err, sizeof err), 0);
    assert_true(c.insecure && c.no_http && cli.hash_token);
    tg_gw_config_free(&c);
}

static void test_http_front_end_options(void **state)
{
    (void)state;
    struct tg_gw_config c;
    tg_gw_config_init(&c);
    assert_int_equal(c.http_max_pending, 64);
    assert_int_equal(c.http_max_pending_per_source, 8);
    parse_ok(&c, "http-host = gw.example.com\nhttp-host 10.0.0.5\nhttp-host = [fd00::5]\n"
                 "http-max-pending = 10\nhttp-max-pending-per-source 0\n");
    assert_int_equal(c.n_http_hosts, 3);
    assert_string_equal(c.http_hosts[0], "gw.example.com");
    assert_string_equal(c.http_hosts[2], "[fd00::5]");
    assert_int_equal(c.http_max_pending, 10);
    assert_int_equal(c.http_max_pending_per_source, 0);
    tg_gw_config_free(&c);
    expect_parse_error("http-host = https://gw.example.com\n", "http-host");
    expect_parse_error("http-host = gw.example.com:8037\n", "not a host name");
    expect_parse_error("http-host = fd00::5\n", "http-host");
    expect_parse_error("http-max-pending = many\n", "not a count");
    /* --gen-token is command-line only */
    expect_parse_error("gen-token\n", "unknown option");
    struct tg_gw_cli cli;
    char err[256];
    char *gen[] = {"tracegated", "--gen-token", "--http-host", "a.example", NULL};
    tg_gw_config_init(&c);
    assert_int_equal(tg_gw_config_parse_args(&c, 4, gen, &cli, err, sizeof err), 0);
    assert_true(cli.gen_token);
    assert_int_equal(c.n_http_hosts, 1);
    tg_gw_config_free(&c);
}

/* web-root: a tree any part of which every user can write is refused at start and at SIGHUP (what
 * it serves runs with the gateway's origin in a browser); group-writable passes (a deploy group). */
static void test_web_root_trust(void **state)
{
    (void)state;
    char root[512], sub[600], file[700], text[800], err[512];
    snprintf(root, sizeof root, "%s/www", g_dir);
    snprintf(sub, sizeof sub, "%s/assets", root);
    snprintf(file, sizeof file, "%s/app.js", sub);
    assert_int_equal(mkdir(root, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("x\n", f);
    fclose(f);
    char link[700];
    snprintf(link, sizeof link, "%s/tmp-link", root);
    assert_int_equal(symlink("/tmp", link), 0); /* points at a world-writable directory: not walked */
    snprintf(text, sizeof text, "no-http\nweb-root = %s\n", root);
    struct tg_gw_config c;

    parse_ok(&c, text);
    assert_int_equal(validate(&c, err, sizeof err), 0);
    tg_gw_config_free(&c);

    assert_int_equal(chmod(file, 0664), 0); /* group: the operator's choice */
    assert_int_equal(chmod(sub, 0775), 0);
    parse_ok(&c, text);
    assert_int_equal(validate(&c, err, sizeof err), 0);
    tg_gw_config_free(&c);

    assert_int_equal(chmod(file, 0666), 0);
    parse_ok(&c, text);
    assert_int_equal(validate(&c, err, sizeof err), -1);
    if (!strstr(err, "app.js: writable by every user") || !strstr(err, "chmod o-w"))
        fail_msg("unexpected error: %s", err);
    tg_gw_config_free(&c);
    assert_int_equal(chmod(file, 0644), 0);

    assert_int_equal(chmod(sub, 01777), 0); /* sticky does not help: others can still add files */
    parse_ok(&c, text);
    assert_int_equal(validate(&c, err, sizeof err), -1);
    if (!strstr(err, "assets: writable by every user"))
        fail_msg("unexpected error: %s", err);
    tg_gw_config_free(&c);
    assert_int_equal(chmod(sub, 0755), 0);
}

static void adb_addr_is(const char *spec, const char *want)
{
    struct tg_addr a;
    char err[256] = "";
    if (tg_gw_adb_addr_parse(spec, &a, err, sizeof err) != 0)
        fail_msg("%s: %s", spec, err);
    assert_string_equal(a.text, want);
}

static void adb_addr_bad(const char *spec, const char *want)
{
    struct tg_addr a;
    char err[256] = "";
    assert_int_equal(tg_gw_adb_addr_parse(spec, &a, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("%s: error '%s' does not contain '%s'", spec, err, want);
}

/* /adb: http-adb, adb-server (adb's own socket specs, ADB_SERVER_SOCKET), adb-roles */
static void test_adb_options(void **state)
{
    (void)state;
    adb_addr_is("tcp:5037", "127.0.0.1:5037");
    adb_addr_is("tcp:127.0.0.1:15037", "127.0.0.1:15037");
    adb_addr_is("tcp:[::1]:5037", "[::1]:5037");
    adb_addr_is("tcp://127.0.0.1:5038", "127.0.0.1:5038");
    adb_addr_is("127.0.0.1:5039", "127.0.0.1:5039");
    adb_addr_is("localfilesystem:/tmp/adb.sock", "/tmp/adb.sock");
    adb_addr_is("localabstract:adbd", "@adbd");
    adb_addr_is("unix:/run/adb.sock", "/run/adb.sock");
    adb_addr_bad("tcp:", "tcp:PORT");
    adb_addr_bad("tcp:host:port", "the port must be a number");
    adb_addr_bad("localfilesystem:", "localfilesystem:PATH");
    adb_addr_bad("usb:1-2", "not an ADB server address");
    adb_addr_bad("", "empty");

    const char *src;
    unsetenv("ADB_SERVER_SOCKET");
    assert_string_equal(tg_gw_adb_addr_choose(NULL, &src), TG_GW_ADB_DEFAULT_SERVER);
    assert_string_equal(src, "default");
    setenv("ADB_SERVER_SOCKET", "tcp:localhost:6000", 1);
    assert_string_equal(tg_gw_adb_addr_choose(NULL, &src), "tcp:localhost:6000");
    assert_string_equal(src, "ADB_SERVER_SOCKET");
    assert_string_equal(tg_gw_adb_addr_choose("tcp:7000", &src), "tcp:7000");
    assert_string_equal(src, "adb-server");

    /* validate: on a loopback front end /adb is on, with the address resolved */
    struct tg_gw_config c;
    char err[512] = "";
    setenv("ADB_SERVER_SOCKET", "tcp:16000", 1);
    parse_ok(&c, "http = 127.0.0.1:8037\n");
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), 0);
    assert_true(c.adb_enabled);
    assert_string_equal(c.adb_addr.text, "127.0.0.1:16000");
    assert_string_equal(c.adb_server_text, "tcp:16000 (ADB_SERVER_SOCKET)");
    tg_gw_config_free(&c);
    /* the option wins over the environment */
    parse_ok(&c, "adb-server = localfilesystem:/run/adb.sock\nadb-roles = adb\n");
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), 0);
    assert_string_equal(c.adb_addr.text, "/run/adb.sock");
    assert_int_equal(c.adb_roles, TG_GW_ROLE_ADB);
    tg_gw_config_free(&c);
    /* a bad ADB_SERVER_SOCKET is named as such */
    setenv("ADB_SERVER_SOCKET", "bogus", 1);
    parse_ok(&c, "");
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "ADB_SERVER_SOCKET"));
    tg_gw_config_free(&c);
    /* ... unless /adb is off */
    parse_ok(&c, "http-adb = off\n");
    assert_int_equal(c.http_adb, -1);
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), 0);
    assert_false(c.adb_enabled);
    tg_gw_config_free(&c);
    unsetenv("ADB_SERVER_SOCKET");
    /* a non-loopback front end: off unless http-adb = on */
    parse_ok(&c, "http = 0.0.0.0:8037\ninsecure\n");
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), 0);
    assert_false(c.adb_enabled);
    tg_gw_config_free(&c);
    parse_ok(&c, "http = 0.0.0.0:8037\ninsecure\nhttp-adb = on\n");
    assert_int_equal(c.http_adb, 1);
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), 0);
    assert_true(c.adb_enabled);
    assert_string_equal(c.adb_server_text, TG_GW_ADB_DEFAULT_SERVER);
    tg_gw_config_free(&c);
    parse_ok(&c, "http-adb = auto\n");
    assert_int_equal(c.http_adb, 0);
    tg_gw_config_free(&c);
    expect_parse_error("http-adb = sometimes\n", "auto, on or off");
    expect_parse_error("adb-roles = shell\n", "not a role list");
    parse_ok(&c, "adb-server = usb:1\n");
    assert_int_equal(tg_gw_config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "adb-server"));
    tg_gw_config_free(&c);
}

/* ws-data-path: native by default, lws on request, anything else refused with the choices */
static void test_ws_data_path(void **state)
{
    (void)state;
    struct tg_gw_config c;
    parse_ok(&c, "");
    assert_int_equal(c.ws_lws_data_path, 0);
    tg_gw_config_free(&c);
    parse_ok(&c, "ws-data-path = lws\n");
    assert_int_equal(c.ws_lws_data_path, 1);
    tg_gw_config_free(&c);
    parse_ok(&c, "ws-data-path = native\n");
    assert_int_equal(c.ws_lws_data_path, 0);
    tg_gw_config_free(&c);
    expect_parse_error("ws-data-path = seam\n", "not native or lws");
}

/* --help's "Roles:" line names every role the role lists accept (it lacked link and spans) */
static void test_usage_names_every_role(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    tg_gw_config_usage(f);
    assert_int_equal(fclose(f), 0);
    char *line = strstr(text, "Roles: ");
    assert_non_null(line);
    char *end = strstr(line, ". ");
    assert_non_null(end);
    *end = '\0';
    int named = 0;
    for (unsigned bit = 1; bit; bit <<= 1) {
        const char *name = tg_gw_role_name(bit);
        if (strcmp(name, "none") == 0)
            continue;
        assert_int_equal(tg_gw_roles_parse(name), bit);
        char word[40];
        snprintf(word, sizeof word, " %s", name);
        if (!strstr(line, word))
            fail_msg("'%s' lacks the role %s", line, name);
        named++;
    }
    assert_int_equal(named, 7);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_source_prefix6),
        cmocka_unit_test(test_file_syntax),        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_listen_specs),       cmocka_unit_test(test_validate_security),
        cmocka_unit_test(test_args_override_file), cmocka_unit_test(test_http_front_end_options),
        cmocka_unit_test(test_adb_options),        cmocka_unit_test(test_ws_data_path),        cmocka_unit_test(test_usage_names_every_role),
        cmocka_unit_test(test_web_root_trust),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
