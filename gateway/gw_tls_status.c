/* gw_tls_status.c: the "tls" object of /api/status and tracegated_tls_* metrics: whether the
 * kernel offers TLS, the data path new connections take, and how many connections use kernel
 * TLS for sending / receiving or the batched path (see gw_tls_status.h, docs/gateway.md). */
#include "gw_tls_status.h"

#include "net/tls.h"

void tg_gw_tls_status_json(FILE *f)
{
    struct tg_tls_stats st;
    tg_tls_stats_get(&st);
    fprintf(f,
            "\"tls\":{\"kernel_tls\":\"%s\",\"configured_path\":\"%s\",\"path\":\"%s\","
            "\"connections\":{\"open\":%llu,\"ktls_send\":%llu,\"ktls_recv\":%llu,\"batched\":%llu,"
            "\"socket_userspace\":%llu},"
            "\"handshakes\":{\"total\":%llu,\"ktls_send\":%llu,\"ktls_recv\":%llu,\"batched\":%llu}}",
            st.kernel_ktls ? "available" : "unavailable", tg_tls_path_name(tg_tls_get_path()),
            tg_tls_path_name(st.path), (unsigned long long)st.open,
            (unsigned long long)st.ktls_send, (unsigned long long)st.ktls_recv, (unsigned long long)st.batched,
            (unsigned long long)st.socket_user, (unsigned long long)st.total, (unsigned long long)st.total_ktls_send,
            (unsigned long long)st.total_ktls_recv, (unsigned long long)st.total_batched);
}

void tg_gw_tls_metrics(FILE *f)
{
    struct tg_tls_stats st;
    tg_tls_stats_get(&st);
    fprintf(f, "# HELP tracegated_tls_kernel_available Whether the kernel offers TLS (the tls TCP ULP) to tracegated.\n"
               "# TYPE tracegated_tls_kernel_available gauge\n"
               "tracegated_tls_kernel_available %d\n",
            st.kernel_ktls ? 1 : 0);
    fprintf(f,
            "# HELP tracegated_tls_connections Established TLS connections by data path: kernel TLS sending "
            "(ktls_send) or receiving (ktls_recv), records batched in user space (batched), or OpenSSL on the socket "
            "without kernel TLS (socket_userspace).\n"
            "# TYPE tracegated_tls_connections gauge\n"
            "tracegated_tls_connections{path=\"ktls_send\"} %llu\n"
            "tracegated_tls_connections{path=\"ktls_recv\"} %llu\n"
            "tracegated_tls_connections{path=\"batched\"} %llu\n"
            "tracegated_tls_connections{path=\"socket_userspace\"} %llu\n",
            (unsigned long long)st.ktls_send, (unsigned long long)st.ktls_recv, (unsigned long long)st.batched,
            (unsigned long long)st.socket_user);
    fprintf(f,
            "# HELP tracegated_tls_handshakes_total TLS handshakes completed, by the data path the connection took.\n"
            "# TYPE tracegated_tls_handshakes_total counter\n"
            "tracegated_tls_handshakes_total{path=\"all\"} %llu\n"
            "tracegated_tls_handshakes_total{path=\"ktls_send\"} %llu\n"
            "tracegated_tls_handshakes_total{path=\"ktls_recv\"} %llu\n"
            "tracegated_tls_handshakes_total{path=\"batched\"} %llu\n",
            (unsigned long long)st.total, (unsigned long long)st.total_ktls_send,
            (unsigned long long)st.total_ktls_recv, (unsigned long long)st.total_batched);
}
