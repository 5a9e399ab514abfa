/* gw_acl.c: roles and the per-method access policy of the gateway (which role may bind which
 * service and call which method), by name as learned from BindServiceReply. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gw.h"
#include "gw_bridge.h"

static const struct {
    unsigned bit;
    const char *name;
} k_roles[] = {
    {TG_GW_ROLE_OBSERVER, "observer"},
    {TG_GW_ROLE_RECORDER, "recorder"},
    {TG_GW_ROLE_PRODUCER, "producer"},
    {TG_GW_ROLE_ADMIN, "admin"},
    {TG_GW_ROLE_LINK, "link"},
    {TG_GW_ROLE_ADB, "adb"},
    {TG_GW_ROLE_SPANS, "spans"},
};

/* Consumer methods that only read state: what an observer may call. */
static const char *const k_observer_methods[] = {"QueryServiceState", "QueryCapabilities", "GetTraceStats",
                                                 "ObserveEvents"};

const char *tg_gw_role_name(unsigned role_bit)
{
    for (size_t i = 0; i < sizeof k_roles / sizeof k_roles[0]; i++)
        if (k_roles[i].bit == role_bit)
            return k_roles[i].name;
    return "none";
}

unsigned tg_gw_roles_parse(const char *s)
{
    if (!s)
        return 0;
    unsigned roles = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ' && *e != '\t')
            e++;
        size_t n = (size_t)(e - p);
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof k_roles / sizeof k_roles[0]; i++)
            if (strlen(k_roles[i].name) == n && strncasecmp(k_roles[i].name, p, n) == 0)
                bit = k_roles[i].bit;
        if (!bit)
            return 0;
        roles |= bit;
        while (*e == ' ' || *e == '\t')
            e++;
        if (*e == '\0')
            break;
        if (*e != ',')
            return 0;
        p = e + 1;
    }
    return roles;
}

size_t tg_gw_roles_format(unsigned roles, char *buf, size_t len)
{
    size_t pos = 0;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof k_roles / sizeof k_roles[0]; i++) {
        if (!(roles & k_roles[i].bit))
            continue;
        int n = snprintf(buf + pos, pos < len ? len - pos : 0, "%s%s", pos ? "," : "", k_roles[i].name);
        if (n > 0)
            pos += (size_t)n;
    }
    if (pos == 0 && len)
        snprintf(buf, len, "none");
    return pos;
}

static int is_observer_method(const char *method)
{
    for (size_t i = 0; i < sizeof k_observer_methods / sizeof k_observer_methods[0]; i++)
        if (strcmp(method, k_observer_methods[i]) == 0)
            return 1;
    return 0;
}

int tg_gw_acl_allows(unsigned roles, const char *service, const char *method)
{
    if (!service || !method || !*method)
        return 0;
    if (strcmp(service, TG_GW_SVC_AUTH) == 0)
        return strcmp(method, "Authenticate") == 0; /* anyone, even before having roles */
    if (roles & TG_GW_ROLE_ADMIN)
        return 1;
    if (strcmp(service, "ConsumerPort") == 0) {
        if (roles & TG_GW_ROLE_RECORDER)
            return 1;
        return (roles & TG_GW_ROLE_OBSERVER) && is_observer_method(method);
    }
    if (strcmp(service, "ProducerPort") == 0)
        return (roles & TG_GW_ROLE_PRODUCER) != 0;
    if (strcmp(service, TG_GW_SVC_SESSION) == 0)
        return (roles & TG_GW_ROLE_RECORDER) != 0;
    if (strcmp(service, TG_GW_SVC_FLEET) == 0) { /* choosing a node grants nothing: the ACL still applies there */
        if (strcmp(method, "AdbDevices") == 0)
            return (roles & TG_GW_ROLE_ADB) != 0;
        if (strcmp(method, "Spans") == 0)
            return (roles & TG_GW_ROLE_SPANS) != 0;
        if (strcmp(method, "ListNodes") == 0 && (roles & TG_GW_ROLE_SPANS))
            return 1; /* `tracectl spans --all` lists the nodes first; the spans name them anyway */
        return (roles & (TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER)) != 0;
    }
    if (strcmp(service, TG_GW_SVC_GATEWAY) == 0) /* the gateway's counters: who may read /metrics */
        return (roles & (TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER)) != 0;
    /* RelayPort and anything unknown: admin only (fail closed). */
    return 0;
}

int tg_gw_acl_may_bind(unsigned roles, const char *service)
{
    if (!service)
        return 0;
    if (strcmp(service, TG_GW_SVC_AUTH) == 0)
        return 1;
    if (roles & TG_GW_ROLE_ADMIN)
        return 1;
    if (strcmp(service, "ConsumerPort") == 0)
        return (roles & (TG_GW_ROLE_RECORDER | TG_GW_ROLE_OBSERVER)) != 0;
    if (strcmp(service, "ProducerPort") == 0)
        return (roles & TG_GW_ROLE_PRODUCER) != 0;
    if (strcmp(service, TG_GW_SVC_SESSION) == 0)
        return (roles & TG_GW_ROLE_RECORDER) != 0;
    if (strcmp(service, TG_GW_SVC_FLEET) == 0)
        return (roles & (TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER | TG_GW_ROLE_ADB |
                          TG_GW_ROLE_SPANS)) != 0;
    if (strcmp(service, TG_GW_SVC_GATEWAY) == 0)
        return (roles & (TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER)) != 0;
    return 0;
}

const char *tg_gw_transport_name(enum tg_gw_transport t)
{
    static const char *const names[TG_GW_T_COUNT] = {"unix", "tcp", "tls", "ws", "wss", "link"};
    return (int)t >= 0 && t < TG_GW_T_COUNT ? names[t] : "unknown";
}
