/* test_service_sockets.c: the service's listening sockets: configurable
 * UNIX paths and TCP addresses (comma lists), socket file permissions
 * (producer socket world-writable, consumer socket private), refusing to
 * steal a live socket, removing socket files on shutdown, shmem emulation
 * for producers on TCP, and Perfetto's default socket names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_service_util.h"
#include "tg_test_util.h"

#include "producer_port.pb-c.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_listen_paths_and_modes(void **state)
{
    (void)state;
    char dir[] = "/tmp/tg-svc-sock-XXXXXX";
    assert_non_null(mkdtemp(dir));
    int port = tg_test_free_tcp_port();
    assert_true(port > 0);
    char psock[512], csock[512], plist[600];
    snprintf(psock, sizeof psock, "%s/prod.sock", dir);
    snprintf(csock, sizeof csock, "%s/cons.sock", dir);
    snprintf(plist, sizeof plist, "%s,127.0.0.1:%d", psock, port);
    struct event_base *base = event_base_new();
    struct tg_service_opts o;
    memset(&o, 0, sizeof o);
    o.producer_socks = plist;
    o.consumer_socks = csock;
    char err[256];
    tg_service *svc = tg_service_new(base, &o, err, sizeof err);
    assert_non_null(svc);
    struct stat st;
    assert_int_equal(stat(psock, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0666);
    assert_int_equal(stat(csock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* a second service must not steal the live sockets */
    struct tg_service_opts o2 = o;
    o2.producer_socks = "";
    tg_service *svc2 = tg_service_new(base, &o2, err, sizeof err);
    assert_null(svc2);
    assert_non_null(strstr(err, "in use"));
    assert_int_equal(stat(csock, &st), 0); /* still there */

    /* a producer on the TCP address is told to use shmem emulation */
    struct ts_env e = {base, svc};
    struct ts_raw r;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    assert_int_equal(ts_raw_connect_addr(&r, addr), 0);
    assert_int_equal(ts_raw_bind(&e, &r, 1, "ProducerPort", NULL), 0);
    Perfetto__Protos__InitializeConnectionRequest ic = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)"tcp";
    assert_int_equal(ts_raw_invoke(&e, &r, 2, 1, 1, &ic.base, 0, -1), 0);
    struct ts_frame f;
    assert_true(ts_raw_wait(&e, &r, 2, &f, 5000));
    Perfetto__Protos__InitializeConnectionResponse *resp =
        perfetto__protos__initialize_connection_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(resp);
    assert_true(resp->use_shmem_emulation);
    perfetto__protos__initialize_connection_response__free_unpacked(resp, NULL);
    ts_frame_free(&f);
    ts_raw_close(&r);
    /* and on the UNIX path it is not */
    assert_int_equal(ts_raw_connect_addr(&r, psock), 0);
    assert_int_equal(ts_raw_bind(&e, &r, 1, "ProducerPort", NULL), 0);
    assert_int_equal(ts_raw_invoke(&e, &r, 2, 1, 1, &ic.base, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &r, 2, &f, 5000));
    resp = perfetto__protos__initialize_connection_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(resp);
    assert_false(resp->use_shmem_emulation);
    perfetto__protos__initialize_connection_response__free_unpacked(resp, NULL);
    ts_frame_free(&f);
    ts_raw_close(&r);

    tg_service_free(svc);
    assert_int_not_equal(stat(psock, &st), 0); /* socket files removed */
    assert_int_not_equal(stat(csock, &st), 0);
    /* a stale socket file (nobody listening) is replaced */
    svc = tg_service_new(base, &o, err, sizeof err);
    assert_non_null(svc);
    tg_service_free(svc);
    event_base_free(base);
    rmdir(dir);
}

static void test_default_socket_names(void **state)
{
    (void)state;
    char p[512], c[512];
    unsetenv("PERFETTO_PRODUCER_SOCK_NAME");
    unsetenv("PERFETTO_CONSUMER_SOCK_NAME");
    tg_service_default_sockets(p, sizeof p, c, sizeof c);
    if (access("/run/perfetto/", X_OK) == 0) {
        assert_string_equal(p, "/run/perfetto/traced-producer.sock");
        assert_string_equal(c, "/run/perfetto/traced-consumer.sock");
    } else {
        assert_string_equal(p, "/tmp/perfetto-producer");
        assert_string_equal(c, "/tmp/perfetto-consumer");
    }
    setenv("PERFETTO_PRODUCER_SOCK_NAME", "/tmp/a.sock,127.0.0.1:7001", 1);
    setenv("PERFETTO_CONSUMER_SOCK_NAME", "@abstract-consumer", 1);
    tg_service_default_sockets(p, sizeof p, c, sizeof c);
    assert_string_equal(p, "/tmp/a.sock,127.0.0.1:7001");
    assert_string_equal(c, "@abstract-consumer");
    unsetenv("PERFETTO_PRODUCER_SOCK_NAME");
    unsetenv("PERFETTO_CONSUMER_SOCK_NAME");
}

static void test_connect_local(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_raw r;
    assert_int_equal(ts_raw_open(&e, &r, 0, 0), 0);
    struct ts_frame f;
    assert_int_equal(ts_raw_bind(&e, &r, 1, "ConsumerPort", &f), 0);
    assert_int_equal(f.fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    ts_frame_free(&f);
    /* the consumer socket does not serve ProducerPort */
    assert_int_equal(ts_raw_bind(&e, &r, 2, "ProducerPort", &f), 0);
    assert_int_equal(f.fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    assert_true(f.fi.msg_len <= 2); /* success unset, no methods */
    ts_frame_free(&f);
    ts_raw_close(&r);
    ts_env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listen_paths_and_modes),
        cmocka_unit_test(test_default_socket_names),
        cmocka_unit_test(test_connect_local),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
