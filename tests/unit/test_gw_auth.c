/* test_gw_auth.c: token files (parsing, errors with line numbers, hashing), constant-time token
 * lookup, reload of the token table, and the WebSocket Origin allow-list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw.h"
#include "gw_auth.h"

/* sha256("alpha") */
#define H_ALPHA "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8"

static void test_sha256(void **state)
{
    (void)state;
    char hex[65];
    tg_gw_sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    tg_gw_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    tg_gw_sha256_hex("alpha", 5, hex);
    assert_string_equal(hex, H_ALPHA);
}

static struct tg_gw_tokens *parse_ok(const char *text)
{
    struct tg_gw_tokens *t = NULL;
    char err[256] = "";
    int rc = tg_gw_tokens_parse(text, strlen(text), "tokens", &t, err, sizeof err);
    if (rc != 0)
        fail_msg("unexpected parse error: %s", err);
    return t;
}

static void expect_error(const char *text, const char *want)
{
    struct tg_gw_tokens *t = NULL;
    char err[256] = "";
    assert_int_equal(tg_gw_tokens_parse(text, strlen(text), "tokens", &t, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
}

static void test_parse_and_lookup(void **state)
{
    (void)state;
    char hex_beta[65];
    tg_gw_sha256_hex("beta-token", 10, hex_beta);
    char text[1024];
    snprintf(text, sizeof text,
             "# tracegated tokens\n"
             "\n"
             "ci   observer  " H_ALPHA "   # the CI's token\n"
             "alice recorder,producer %s\r\n"
             "ops\tadmin\t%s",
             hex_beta, "0000000000000000000000000000000000000000000000000000000000000001");
    struct tg_gw_tokens *t = parse_ok(text);
    assert_int_equal(tg_gw_tokens_count(t), 3);
    char who[96];
    assert_int_equal(tg_gw_tokens_lookup(t, "alpha", 5, who, sizeof who), TG_GW_ROLE_OBSERVER);
    assert_string_equal(who, "ci");
    assert_int_equal(tg_gw_tokens_lookup(t, "beta-token", 10, who, sizeof who),
                     TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER);
    assert_string_equal(who, "alice");
    assert_int_equal(tg_gw_tokens_lookup(t, "alph", 4, who, sizeof who), 0);
    assert_string_equal(who, "");
    assert_int_equal(tg_gw_tokens_lookup(t, "alpha\n", 6, who, sizeof who), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, "", 0, who, sizeof who), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, NULL, 0, who, sizeof who), 0);
    /* the hash itself is not a token */
    assert_int_equal(tg_gw_tokens_lookup(t, H_ALPHA, 64, who, sizeof who), 0);
    /* uppercase hex is accepted */
    struct tg_gw_tokens *u = parse_ok("x admin 8ED3F6AD685B959EAD7022518E1AF76CD816F8E8EC7CCDDA1ED4018E8F2223F8\n");
    assert_int_equal(tg_gw_tokens_lookup(u, "alpha", 5, NULL, 0), TG_GW_ROLE_ADMIN);
    tg_gw_tokens_free(u);
    tg_gw_tokens_free(t);
    /* an empty file is valid: no tokens */
    t = parse_ok("# nothing yet\n");
    assert_int_equal(tg_gw_tokens_count(t), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, "alpha", 5, NULL, 0), 0);
    tg_gw_tokens_free(t);
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_error("ci observer\n", "tokens:1:");
    expect_error("\n\nci observer " H_ALPHA " extra\n", "tokens:3:");
    expect_error("ci root " H_ALPHA "\n", "bad role");
    expect_error("ci observer 8ed3f6ad\n", "64 hex digits");
    expect_error("ci observer " H_ALPHA "0\n", "64 hex digits");
    expect_error("ci observer zed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8\n", "64 hex");
    expect_error("c/i observer " H_ALPHA "\n", "bad token name");
    expect_error("a observer " H_ALPHA "\na admin e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n",
                 "tokens:2: duplicate token name");
    expect_error("a observer " H_ALPHA "\nb admin " H_ALPHA "\n", "appears twice");
    /* errors never echo the secret-looking field */
    struct tg_gw_tokens *t = NULL;
    char err[256];
    assert_int_equal(tg_gw_tokens_parse("ci observer s3cr3t\n", 19, "f", &t, err, sizeof err), -1);
    assert_null(strstr(err, "s3cr3t"));
}

static void test_load_file(void **state)
{
    (void)state;
    char path[] = "/tmp/tg-test-tokens-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "ci observer " H_ALPHA "\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct tg_gw_tokens *t = NULL;
    char err[256];
    assert_int_equal(tg_gw_tokens_load(path, &t, err, sizeof err), 0);
    assert_int_equal(tg_gw_tokens_count(t), 1);
    tg_gw_tokens_free(t);
    unlink(path);
    assert_int_equal(tg_gw_tokens_load(path, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

static void test_holder_reload(void **state)
{
    (void)state;
    struct tg_gw_auth *a = tg_gw_auth_new();
    char who[96];
    assert_int_equal(tg_gw_auth_lookup(a, "alpha", 5, who, sizeof who), 0);
    tg_gw_auth_set_tokens(a, parse_ok("ci observer " H_ALPHA "\n"));
    assert_int_equal(tg_gw_auth_token_count(a), 1);
    assert_int_equal(tg_gw_auth_lookup(a, "alpha", 5, who, sizeof who), TG_GW_ROLE_OBSERVER);
    char hb[65], line[128];
    tg_gw_sha256_hex("beta", 4, hb);
    snprintf(line, sizeof line, "new recorder %s\n", hb);
    tg_gw_auth_set_tokens(a, parse_ok(line));
    assert_int_equal(tg_gw_auth_lookup(a, "alpha", 5, who, sizeof who), 0);
    assert_int_equal(tg_gw_auth_lookup(a, "beta", 4, who, sizeof who), TG_GW_ROLE_RECORDER);
    assert_string_equal(who, "new");
    tg_gw_auth_set_tokens(a, NULL);
    assert_int_equal(tg_gw_auth_lookup(a, "beta", 4, who, sizeof who), 0);
    tg_gw_auth_free(a);
}

static void test_generated_tokens(void **state)
{
    (void)state;
    char a[TG_GW_TOKEN_GEN_LEN + 1], b[TG_GW_TOKEN_GEN_LEN + 1];
    assert_int_equal(tg_gw_token_generate(a), 0);
    assert_int_equal(tg_gw_token_generate(b), 0);
    assert_int_equal(strlen(a), 43);
    assert_string_not_equal(a, b);
    /* base64url without padding: fits a WebSocket subprotocol */
    assert_int_equal(strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"), 43);
    /* and works as a token */
    char hex[65], line[200], who[96];
    tg_gw_sha256_hex(a, strlen(a), hex);
    snprintf(line, sizeof line, "gen recorder %s\n", hex);
    struct tg_gw_tokens *t = NULL;
    assert_int_equal(tg_gw_tokens_parse(line, strlen(line), "t", &t, NULL, 0), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, a, strlen(a), who, sizeof who), TG_GW_ROLE_RECORDER);
    assert_string_equal(who, "gen");
    assert_int_equal(tg_gw_tokens_lookup(t, b, strlen(b), who, sizeof who), 0);
    tg_gw_tokens_free(t);
}

/* Tokens made the old way (`base64`: '+', '/', '=') also match in their base64url form, which is
 * what fits a WebSocket subprotocol; nothing else does. */
static void test_token_encodings(void **state)
{
    (void)state;
    const char *std = "q+Lr/0Zx1w9Kd4e+Ua/oYvN2c8Gm5bQ3Tj7HsPfXkE0=";  /* standard base64, padded */
    const char *url = "q-Lr_0Zx1w9Kd4e-Ua_oYvN2c8Gm5bQ3Tj7HsPfXkE0";   /* its base64url form */
    const char *urlpad = "Zm9vYmFyYmF6-_==";                           /* base64url, kept padded */
    char h1[65], h2[65], text[400];
    tg_gw_sha256_hex(std, strlen(std), h1);
    tg_gw_sha256_hex(urlpad, strlen(urlpad), h2);
    snprintf(text, sizeof text, "old observer %s\npadded recorder %s\n", h1, h2);
    struct tg_gw_tokens *t = NULL;
    assert_int_equal(tg_gw_tokens_parse(text, strlen(text), "t", &t, NULL, 0), 0);
    char who[96];
    assert_int_equal(tg_gw_tokens_lookup(t, std, strlen(std), who, sizeof who), TG_GW_ROLE_OBSERVER);
    assert_int_equal(tg_gw_tokens_lookup(t, url, strlen(url), who, sizeof who), TG_GW_ROLE_OBSERVER);
    assert_string_equal(who, "old");
    /* only '/' and '=' changed (a '+' fits a subprotocol as it is) */
    assert_int_equal(tg_gw_tokens_lookup(t, "q+Lr_0Zx1w9Kd4e+Ua_oYvN2c8Gm5bQ3Tj7HsPfXkE0", 43, who, sizeof who),
                     TG_GW_ROLE_OBSERVER);
    assert_int_equal(tg_gw_tokens_lookup(t, "Zm9vYmFyYmF6-_", 14, who, sizeof who), TG_GW_ROLE_RECORDER);
    assert_string_equal(who, "padded");
    /* near misses stay misses */
    assert_int_equal(tg_gw_tokens_lookup(t, url, strlen(url) - 1, who, sizeof who), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, "q-Lr_0Zx1w9Kd4e-Ua_oYvN2c8Gm5bQ3Tj7HsPfXkE1", 43, who, sizeof who), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, "q+Lr/0Zx1w9Kd4e+Ua/oYvN2c8Gm5bQ3Tj7HsPfXkE0", 43, who, sizeof who), 0);
    assert_int_equal(tg_gw_tokens_lookup(t, "Zm9vYmFyYmF6-_=", 15, who, sizeof who), 0);
    tg_gw_tokens_free(t);
}

static void test_origins(void **state)
{
    (void)state;
    struct tg_gw_auth *a = tg_gw_auth_new();
    assert_true(tg_gw_auth_origin_allowed(a, "https://ui.perfetto.dev"));
    assert_true(tg_gw_auth_origin_allowed(a, "https://UI.Perfetto.dev/"));
    assert_true(tg_gw_auth_origin_allowed(a, "http://localhost:10000"));
    assert_false(tg_gw_auth_origin_allowed(a, "https://ui.perfetto.dev.evil.com"));
    assert_false(tg_gw_auth_origin_allowed(a, "http://ui.perfetto.dev"));
    assert_false(tg_gw_auth_origin_allowed(a, "https://example.com"));
    assert_false(tg_gw_auth_origin_allowed(a, ""));
    assert_false(tg_gw_auth_origin_allowed(a, NULL));
    const char *extra[] = {"https://example.com", "http://10.0.0.5:9000"};
    assert_int_equal(tg_gw_auth_set_origins(a, extra, 2), 0);
    assert_true(tg_gw_auth_origin_allowed(a, "https://example.com"));
    assert_true(tg_gw_auth_origin_allowed(a, "http://10.0.0.5:9000/"));
    assert_false(tg_gw_auth_origin_allowed(a, "http://10.0.0.5:9001"));
    assert_int_equal(tg_gw_auth_set_origins(a, NULL, 0), 0);
    assert_false(tg_gw_auth_origin_allowed(a, "https://example.com"));
    assert_true(tg_gw_auth_origin_allowed(a, "https://ui.perfetto.dev"));
    tg_gw_auth_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_parse_and_lookup),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_holder_reload),
        cmocka_unit_test(test_origins),
        cmocka_unit_test(test_generated_tokens),
        cmocka_unit_test(test_token_encodings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
