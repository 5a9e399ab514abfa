/* test_tracectl_kcdata.c: `tracectl kcdata FILE` (the built binary, run as a child) on a node
 * descriptor and stats snapshot written by the library, as text, JSON and from stdin; and on a
 * corrupt, a missing and no file. Skipped when $TG_BUILDDIR/src/tracectl/tracectl is absent. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tg_test_util.h"
#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"

static char g_dir[64];
static char g_tracectl[1024];

struct run {
    int status; /* exit code */
    char *out, *err;
};

static char *slurp(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    uint8_t *data;
    size_t len;
    if (tg_test_read_file(path, &data, &len) != 0)
        return strdup("");
    return (char *)data;
}

/* Runs tracectl with args (NULL-terminated), stdin from stdin_path (or /dev/null). */
static void run_tracectl(struct run *r, const char *stdin_path, const char *const *args)
{
    const char *argv[16];
    size_t n = 0;
    argv[n++] = g_tracectl;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char out[256], err[256];
    snprintf(out, sizeof out, "%s/out.txt", g_dir);
    snprintf(err, sizeof err, "%s/err.txt", g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120); /* a safety net only: a hung tracectl dies and the test fails */
        int in = open(stdin_path ? stdin_path : "/dev/null", O_RDONLY);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || o < 0 || e < 0)
            _exit(126);
        dup2(in, 0), dup2(o, 1), dup2(e, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st)) {
        print_error("tracectl did not exit normally (status 0x%x)\n", st);
        fail();
    }
    r->status = WEXITSTATUS(st);
    r->out = slurp("out.txt");
    r->err = slurp("err.txt");
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        print_error("expected [%s] in:\n%s\n", needle, hay);
        fail();
    }
}

static void write_file(const char *name, const uint8_t *data, size_t len, char *path, size_t pathlen)
{
    snprintf(path, pathlen, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static uint8_t *node_and_stats(size_t *len)
{
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "gw-west");
    snprintf(d.version, sizeof d.version, "0.9");
    d.machine_id = 42;
    tg_node_desc_add_cap(&d, "link-resume", NULL, 0);
    assert_int_equal(tg_node_desc_read_clocks(&d), 0);
    const struct tg_kcdata_stat st[] = {{"links_up", 2}, {"frames_relayed", 123456}};
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    tg_node_desc_add(&e, &d);
    tg_kcdata_stats_add(&e, 1, st, 2);
    uint8_t *out;
    assert_int_equal(tg_kcdata_finish(&e, &out, len), 0);
    return out;
}

static int setup(void **state)
{
    (void)state;
    const char *b = getenv("TG_BUILDDIR");
    snprintf(g_tracectl, sizeof g_tracectl, "%s/src/tracectl/tracectl", b ? b : ".");
    snprintf(g_dir, sizeof g_dir, "/tmp/tg_kcdata_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    static const char *const files[] = {"out.txt", "err.txt", "node.kcdata", "bad.kcdata"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return 0;
}

#define NEED_TRACECTL()                                                                                               \
    do {                                                                                                              \
        if (access(g_tracectl, X_OK) != 0) {                                                                          \
            print_message("skipping: %s is not built\n", g_tracectl);                                                \
            skip();                                                                                                   \
        }                                                                                                             \
    } while (0)

static void test_prints_node_and_stats(void **state)
{
    (void)state;
    NEED_TRACECTL();
    size_t len;
    uint8_t *buf = node_and_stats(&len);
    char path[256];
    write_file("node.kcdata", buf, len, path, sizeof path);
    struct run r;
    run_tracectl(&r, NULL, (const char *const[]){"kcdata", path, NULL});
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    assert_contains(r.out, "KCDATA tracegate (magic 0x434B4754)");
    assert_contains(r.out, "container 0x7400 (tg_node) id 1 {\n  tg_node_identity (0x7401) {\n"
                           "    uint64 machine_id = 42 (0x2a)\n    char name[128] = \"gw-west\"\n");
    assert_contains(r.out, "    [0] \"link-resume\"\n");
    assert_contains(r.out, "container 0x7410 (tg_stats) id 1 {\n  uint64 links_up = 2\n"
                           "  uint64 frames_relayed = 123456 (0x1e240)\n}\n");
    run_free(&r);

    run_tracectl(&r, NULL, (const char *const[]){"kcdata", "--json", path, NULL});
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "{\"magic\":1129006932,\"magic_name\":\"tracegate\",\"items\":[");
    assert_contains(r.out, "{\"desc\":\"uint64\",\"name\":\"frames_relayed\",\"value\":123456}");
    run_free(&r);

    run_tracectl(&r, NULL, (const char *const[]){"kcdata", "--offsets", path, NULL});
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "00000010  typedef 0x7401 tg_node_identity");
    run_free(&r);

    /* stdin */
    run_tracectl(&r, path, (const char *const[]){"kcdata", "-", NULL});
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "uint64 links_up = 2\n");
    run_free(&r);
    free(buf);
}

static void test_refuses_bad_input(void **state)
{
    (void)state;
    NEED_TRACECTL();
    size_t len;
    uint8_t *buf = node_and_stats(&len);
    char path[256];
    write_file("bad.kcdata", buf, len - 8, path, sizeof path); /* cut into BUFFER_END */
    struct run r;
    run_tracectl(&r, NULL, (const char *const[]){"kcdata", path, NULL});
    assert_int_equal(r.status, 1);
    char want[512];
    snprintf(want, sizeof want, "tracectl kcdata: %s: truncated: 8 bytes at offset %zu", path, len - 16);
    assert_contains(r.err, want);
    assert_contains(r.out, "uint64 frames_relayed = 123456"); /* what came before is still shown */
    assert_contains(r.out, "error: truncated: 8 bytes");
    run_free(&r);

    memcpy(buf, "CKGT", 4); /* tracegate's magic as a big-endian writer would put it */
    write_file("bad.kcdata", buf, len, path, sizeof path);
    run_tracectl(&r, NULL, (const char *const[]){"kcdata", path, NULL});
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "begin magic 0x54474B43 is the byte-swapped tracegate magic 0x434B4754: the buffer was "
                           "written big-endian");
    run_free(&r);

    memset(buf, 0, 4); /* type 0 is no magic */
    write_file("bad.kcdata", buf, len, path, sizeof path);
    run_tracectl(&r, NULL, (const char *const[]){"kcdata", "--json", path, NULL});
    assert_int_equal(r.status, 1);
    assert_string_equal(r.out, "{\"error\":\"not a KCDATA buffer: unknown begin magic 0x00000000\"}\n");
    run_free(&r);

    snprintf(path, sizeof path, "%s/missing.kcdata", g_dir);
    run_tracectl(&r, NULL, (const char *const[]){"kcdata", path, NULL});
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "tracectl kcdata: cannot open");
    run_free(&r);

    run_tracectl(&r, NULL, (const char *const[]){"kcdata", NULL});
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "tracectl kcdata: missing FILE");
    run_free(&r);

    run_tracectl(&r, NULL, (const char *const[]){"--help", NULL});
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "kcdata FILE [--json]");
    run_free(&r);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prints_node_and_stats),
        cmocka_unit_test(test_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
