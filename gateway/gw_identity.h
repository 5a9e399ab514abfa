/* gw_identity.h: who a gateway client is, and what that makes it.
 *
 * Principals are distinct names the service applies traced's per-uid rules
 * to (see docs/security.md, "How identity flows"):
 *   "uid:<n>"        a local peer, its uid from SO_PEERCRED (UNIX) or
 *                    sock_diag (loopback TCP, WebSocket, TLS);
 *   "token:<name>"   a bearer token's name from the token file;
 *   "cert:<subject>" a verified TLS client certificate;
 *   "anonymous"      an `auth=none` listener (everyone is this one principal).
 * A name too long for the principal buffer ends in a digest of the whole
 * name instead of being cut (base/name_fit.h): principals never merge.
 *
 * Local roles: root and the daemon's own uid are the owners and get the
 * listener's roles (?roles=, else --local-roles, default admin); any other
 * local uid gets --local-user-roles (what traced gives a user: recorder and
 * producer, so its own sessions), capped by the listener's roles. A
 * listener with ?uids= admits only those uids as local (abstract sockets
 * have no file permissions, so they default to the owners); every other
 * peer, and a peer whose uid the kernel cannot tell, must authenticate.
 *
 * Threading: pure functions; any thread. */
#ifndef TRACEGATE_GATEWAY_GW_IDENTITY_H
#define TRACEGATE_GATEWAY_GW_IDENTITY_H

#include <stddef.h>
#include <sys/types.h>

#include "gw.h"

struct tg_ipc_identity;
struct tg_peer_cred;

#define TG_GW_MAX_UIDS 16

struct tg_gw_local_policy {
    unsigned owner_roles;           /* root and the daemon's uid */
    unsigned user_roles;            /* other local uids (already capped by the listener) */
    uid_t uids[TG_GW_MAX_UIDS];     /* allow-list of local uids; n_uids == 0: every local uid */
    size_t n_uids;
};

/* Roles limited to what `ceiling` allows (admin in the ceiling allows all). */
unsigned tg_gw_roles_cap(unsigned roles, unsigned ceiling);

/* A local peer: sets principal "uid:<n>", uid, pid and the roles the policy
 * gives it. Returns the roles (0: this uid must authenticate). */
unsigned tg_gw_identity_local(struct tg_gw_client_info *info, const struct tg_peer_cred *cred,
                              const struct tg_gw_local_policy *pol);
/* A token or certificate principal (name is a token name or a subject). */
void tg_gw_identity_token(struct tg_gw_client_info *info, const char *name, unsigned roles);
void tg_gw_identity_cert(struct tg_gw_client_info *info, const char *subject, unsigned roles);

/* The identity the embedded service sees for this client: the local uid or
 * none ((uid_t)-1), the principal, privileged when the client holds admin. A
 * client that came over a gateway link ("node:A/..." principals) is on
 * machine tg_gw_node_machine_id(info->origin), named after that node: the one
 * the fleet verified when it accepted the channel (the link's authenticated
 * peer, or a node that peer relays), never a node the principal's text names.
 * id->principal and id->machine_name point into info. */
void tg_gw_identity_for_service(const struct tg_gw_client_info *info, struct tg_ipc_identity *id);
/* The machine id of node NAME in traces: Perfetto's FNV-1a machine id of
 * "tracegate-node:NAME" (never 0). */
uint32_t tg_gw_node_machine_id(const char *name);

/* Parses "0,1000,backup" style ?uids= lists (numbers or user names).
 * Returns 0 or -1 with a message. */
int tg_gw_uids_parse(const char *s, uid_t *uids, size_t max, size_t *n, char *err, size_t errlen);

#endif
