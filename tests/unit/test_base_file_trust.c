/* test_base_file_trust.c: which token, config and secret files tracegated refuses to trust
 * (base/file_trust.h): written by others, owned by another user, a secret others can read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_trust.h"

static char g_path[64];

static int mk(void **state)
{
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/tg-trust-XXXXXX");
    int fd = mkstemp(g_path);
    assert_true(fd >= 0);
    close(fd);
    return 0;
}

static int rm(void **state)
{
    (void)state;
    unlink(g_path);
    return 0;
}

/* The check on the file at g_path with mode m; returns its verdict, the message in err. */
static int check(mode_t m, enum tg_file_trust how, char *err, size_t errlen)
{
    assert_int_equal(chmod(g_path, m), 0);
    int fd = open(g_path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    err[0] = '\0';
    int r = tg_file_trust_check(fd, g_path, how, err, errlen);
    close(fd);
    return r;
}

static void test_writable_by_others_refused(void **state)
{
    (void)state;
    char err[700];
    assert_int_equal(check(0644, TG_FILE_DECIDES_ACCESS, err, sizeof err), 0);
    assert_int_equal(check(0600, TG_FILE_DECIDES_ACCESS, err, sizeof err), 0);
    assert_int_equal(check(0664, TG_FILE_DECIDES_ACCESS, err, sizeof err), -1);
    assert_non_null(strstr(err, "writable by its group"));
    assert_non_null(strstr(err, "chmod go-w"));
    assert_int_equal(check(0646, TG_FILE_DECIDES_ACCESS, err, sizeof err), -1);
    assert_non_null(strstr(err, "writable by every user"));
}

static void test_secret_readable_by_others_refused(void **state)
{
    (void)state;
    char err[700];
    assert_int_equal(check(0600, TG_FILE_SECRET, err, sizeof err), 0);
    assert_int_equal(check(0400, TG_FILE_SECRET, err, sizeof err), 0);
    assert_int_equal(check(0644, TG_FILE_SECRET, err, sizeof err), -1);
    assert_non_null(strstr(err, "readable by every user"));
    assert_non_null(strstr(err, "chmod 600"));
    assert_int_equal(check(0640, TG_FILE_SECRET, err, sizeof err), -1);
    assert_non_null(strstr(err, "readable by its group"));
    /* a secret is also a file nobody else may write */
    assert_int_equal(check(0602, TG_FILE_SECRET, err, sizeof err), -1);
}

static void test_private_key_readable_by_everyone_refused(void **state)
{
    (void)state;
    char err[700];
    assert_int_equal(check(0600, TG_FILE_PRIVATE_KEY, err, sizeof err), 0);
    /* a group may read it (Debian gives its ssl-cert group read access to keys) */
    assert_int_equal(check(0640, TG_FILE_PRIVATE_KEY, err, sizeof err), 0);
    assert_int_equal(check(0644, TG_FILE_PRIVATE_KEY, err, sizeof err), -1);
    assert_non_null(strstr(err, "private key but every user can read it"));
    assert_non_null(strstr(err, "chmod o-r"));
    assert_int_equal(check(0604, TG_FILE_PRIVATE_KEY, err, sizeof err), -1);
    /* nor may anyone but its owner write it */
    assert_int_equal(check(0660, TG_FILE_PRIVATE_KEY, err, sizeof err), -1);
    assert_non_null(strstr(err, "writable by its group"));
}

static void test_other_owner_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* only root can give a file away */
    char err[700];
    assert_int_equal(chown(g_path, 65534, 65534), 0);
    assert_int_equal(check(0600, TG_FILE_DECIDES_ACCESS, err, sizeof err), -1);
    assert_non_null(strstr(err, "owned by uid 65534"));
    assert_int_equal(chown(g_path, 0, 0), 0);
    assert_int_equal(check(0600, TG_FILE_DECIDES_ACCESS, err, sizeof err), 0);
}

static void test_not_a_regular_file(void **state)
{
    (void)state;
    int fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    char err[700];
    assert_int_equal(tg_file_trust_check(fd, "/tmp", TG_FILE_DECIDES_ACCESS, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writable_by_others_refused, mk, rm),
        cmocka_unit_test_setup_teardown(test_secret_readable_by_others_refused, mk, rm),
        cmocka_unit_test_setup_teardown(test_private_key_readable_by_everyone_refused, mk, rm),
        cmocka_unit_test_setup_teardown(test_other_owner_refused, mk, rm),
        cmocka_unit_test(test_not_a_regular_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
