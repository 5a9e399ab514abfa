/* gw_identity.c: principals and the roles a client's identity gives it (see gw_identity.h). */
#include "gw_identity.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/name_fit.h"
#include "tracegate/ipc_host.h"
#include "tracegate/peer_cred.h"

unsigned tg_gw_roles_cap(unsigned roles, unsigned ceiling)
{
    if (ceiling & TG_GW_ROLE_ADMIN)
        return roles;
    return roles & ceiling;
}

static int allowed_uid(const struct tg_gw_local_policy *pol, uid_t uid)
{
    if (pol->n_uids == 0)
        return 1;
    for (size_t i = 0; i < pol->n_uids; i++)
        if (pol->uids[i] == uid)
            return 1;
    return 0;
}

unsigned tg_gw_identity_local(struct tg_gw_client_info *info, const struct tg_peer_cred *cred,
                              const struct tg_gw_local_policy *pol)
{
    info->has_uid = 1;
    info->uid = cred->uid;
    info->pid = cred->pid;
    snprintf(info->principal, sizeof info->principal, "uid:%u", (unsigned)cred->uid);
    if (!allowed_uid(pol, cred->uid)) {
        info->roles = 0;
        return 0;
    }
    int owner = cred->uid == 0 || cred->uid == geteuid();
    info->auth = TG_GW_AUTH_LOCAL;
    info->roles = owner ? pol->owner_roles : pol->user_roles;
    if (!info->roles)
        info->auth = TG_GW_AUTH_NONE;
    return info->roles;
}

static void set_named(struct tg_gw_client_info *info, const char *kind, const char *name, unsigned roles)
{
    /* A principal is what the service keeps sessions apart by: a long name is never cut (every
     * certificate subject sharing the kept prefix would be one principal), it ends in a digest of
     * the whole name instead (tg_name_fit). */
    char pre[16];
    snprintf(pre, sizeof pre, "%s:", kind);
    if (tg_name_fit(info->principal, sizeof info->principal, pre, name && *name ? name : "?") < 0) {
        info->principal[0] = '\0';
        roles = 0; /* no name that is surely its own: no roles */
    }
    info->roles = roles;
}

void tg_gw_identity_token(struct tg_gw_client_info *info, const char *name, unsigned roles)
{
    info->auth = TG_GW_AUTH_TOKEN;
    set_named(info, "token", name, roles);
}

void tg_gw_identity_cert(struct tg_gw_client_info *info, const char *subject, unsigned roles)
{
    info->auth = TG_GW_AUTH_CERT;
    set_named(info, "cert", subject, roles);
}

void tg_gw_identity_for_service(const struct tg_gw_client_info *info, struct tg_ipc_identity *id)
{
    memset(id, 0, sizeof *id);
    int local_uid = info->has_uid && strncmp(info->principal, "uid:", 4) == 0;
    id->uid = local_uid ? info->uid : (uid_t)-1;
    id->pid = info->has_uid ? info->pid : -1;
    id->principal = info->principal[0] ? info->principal : "anonymous";
    id->privileged = (info->roles & TG_GW_ROLE_ADMIN) != 0;
    /* the machine is the one the fleet verified when it accepted the link channel, never what the
     * principal's node:X/ parts say (the part after the link's own node:<peer>/ is the peer's claim) */
    if (info->origin[0]) {
        id->machine_id = tg_gw_node_machine_id(info->origin);
        id->machine_name = info->origin;
    }
}

uint32_t tg_gw_node_machine_id(const char *name)
{
    char hint[80];
    int n = snprintf(hint, sizeof hint, "tracegate-node:%s", name);
    return tg_ipc_machine_id_from_hint(hint, n < 0 ? 0 : (size_t)n < sizeof hint ? (size_t)n : sizeof hint - 1);
}

int tg_gw_uids_parse(const char *s, uid_t *uids, size_t max, size_t *n, char *err, size_t errlen)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item) {
            snprintf(err, errlen, "uids= '%s': empty or overlong entry", s);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (*n >= max) {
            snprintf(err, errlen, "uids= '%s': at most %zu uids", s, max);
            return -1;
        }
        char *end;
        errno = 0;
        unsigned long v = strtoul(item, &end, 10);
        if (*end == '\0' && errno == 0 && v < (unsigned long)(uid_t)-1) {
            uids[(*n)++] = (uid_t)v;
        } else {
            struct passwd *pw = getpwnam(item);
            if (!pw) {
                snprintf(err, errlen, "uids= '%s': no user '%s'", s, item);
                return -1;
            }
            uids[(*n)++] = pw->pw_uid;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (*n == 0) {
        snprintf(err, errlen, "uids= is empty");
        return -1;
    }
    return 0;
}
