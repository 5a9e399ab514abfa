/* gw_adb_target.c: opens the byte stream of an /adb pipe: this node's ADB server, or another node's through a router (see gw_adb_target.h). */
#include "gw_adb_target.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tg_gw_adb_target {
    struct tg_addr server;
    char text[300];
    char node_name[64];
    char default_node[64]; /* plain /adb goes there (adb-node), "" = this node */
    tg_gw_adb_router_fn router;
    void *router_ctx;
};

struct tg_gw_adb_target *tg_gw_adb_target_new(const struct tg_addr *server, const char *text, const char *node_name)
{
    struct tg_gw_adb_target *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->server = *server;
    snprintf(t->text, sizeof t->text, "%s", text && *text ? text : server->text);
    snprintf(t->node_name, sizeof t->node_name, "%s", node_name ? node_name : "");
    return t;
}

void tg_gw_adb_target_free(struct tg_gw_adb_target *t) { free(t); }

void tg_gw_adb_target_set_router(struct tg_gw_adb_target *t, tg_gw_adb_router_fn fn, void *ctx)
{
    t->router = fn;
    t->router_ctx = ctx;
}

int tg_gw_adb_target_is_local(const struct tg_gw_adb_target *t, const char *node)
{
    return !node || !*node || (t->node_name[0] && strcmp(node, t->node_name) == 0);
}

const char *tg_gw_adb_target_describe(const struct tg_gw_adb_target *t) { return t->text; }

void tg_gw_adb_target_set_default_node(struct tg_gw_adb_target *t, const char *node)
{
    snprintf(t->default_node, sizeof t->default_node, "%s", node ? node : "");
}

int tg_gw_adb_target_open(struct tg_gw_adb_target *t, const char *node, const struct tg_gw_client_info *who,
                          char *err, size_t errlen)
{
    if ((!node || !*node) && t->default_node[0])
        node = t->default_node; /* plain /adb, sent on to the configured node (adb-node) */
    if (!tg_gw_adb_target_is_local(t, node)) {
        if (t->router)
            return t->router(t->router_ctx, node, who, err, errlen);
        snprintf(err, errlen, "no node %.63s here (ADB across gateway links is not available)", node);
        return -1;
    }
    int fd = tg_addr_connect(&t->server);
    if (fd < 0)
        snprintf(err, errlen, "ADB server %.60s not reachable: %s", t->text, strerror(errno));
    return fd;
}
