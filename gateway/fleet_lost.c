/* fleet_lost.c: channels lost past a link's resume window (docs/link-protocol.md §6). The
 * tracing session a lost consumer channel led to is kept, Detached under a key: toward the
 * service, the node whose session is served here Detaches it, one whose session is routed on over
 * another link passes the key on in a LOST record; toward the client, a federated fan-out marks
 * the node lost, a session whose client came over another link passes the key back, otherwise
 * the key is logged for the local client. */
#include "link_int.h"

#include <event2/bufferevent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer_port.pb-c.h"
#include "fleet_fanout.h"
#include "gw_bridge.h"
#include "gw_core.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"

#define LOG "link"

void tg_fleet_detach_key(const char *opener, uint64_t channel_id, char *key, size_t len)
{
    snprintf(key, len, "tracegate-link-%s-%llx", opener, (unsigned long long)channel_id);
}

struct lost_channel {
    char key[128];
};

static void on_lost_detach_reply(struct tg_gw_session *s, int success, int has_more, const uint8_t *reply,
                                 size_t len, void *arg)
{
    struct lost_channel *lc = arg;
    (void)reply;
    (void)len;
    if (has_more)
        return;
    if (success)
        tg_warn(LOG, "session %llu: its link is gone; the tracing session was detached with key \"%s\" and keeps "
                     "running. Collect it with `tracectl --node NAME attach URL %s` once the link is back",
                (unsigned long long)tg_gw_session_id(s), lc->key, lc->key);
    else
        tg_info(LOG, "session %llu: its link is gone and it owned no tracing session to keep",
                (unsigned long long)tg_gw_session_id(s));
    free(lc);
    tg_gw_session_close(s, "the link did not come back within the resume window", 0);
}

/* The channel whose local pair end is the partner of `end` (the end a gateway session or the
 * fan-out holds), or NULL. */
static struct link_channel *channel_of_end(struct tg_fleet *f, struct bufferevent *end)
{
    if (!end)
        return NULL;
    for (struct tg_link *l = tg_fleet_links(f); l; l = l->next)
        for (struct link_channel *ch = l->channels; ch; ch = ch->next)
            if (ch->local && bufferevent_pair_get_partner(ch->local) == end)
                return ch;
    return NULL;
}

static struct link_channel *channel_of_conn(struct tg_fleet *f, tg_conn *c)
{
    return c ? channel_of_end(f, tg_conn_bev(c)) : NULL;
}

/* The gateway session whose client is inbound channel ch. */
static struct tg_gw_session *session_of_inbound(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch)
{
    char peer[128];
    snprintf(peer, sizeof peer, "link(%s#%llx)", l->peer_name, (unsigned long long)ch->id);
    for (struct tg_gw_session *s = tg_fleet_gw(f)->sessions; s; s = tg_gw_session_next(s)) {
        const struct tg_gw_client_info *i = tg_gw_session_info(s);
        if (i->transport == TG_GW_T_LINK && !strcmp(i->peer, peer))
            return s;
    }
    return NULL;
}

/* The gateway session whose upstream is outbound channel ch. */
static struct tg_gw_session *session_over(struct tg_fleet *f, struct link_channel *ch)
{
    for (struct tg_gw_session *s = tg_fleet_gw(f)->sessions; s; s = tg_gw_session_next(s))
        if (channel_of_conn(f, tg_gw_session_up(s)) == ch)
            return s;
    return NULL;
}

/* Toward the service: the client of inbound consumer channel ch is gone for good. A session
 * served here is Detached under key; one routed on over another link passes the key on in a LOST
 * record, and the next node does this in turn (docs/link-protocol.md §6). */
static void lost_toward_service(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, const char *key)
{
    if (!ch->inbound || ch->producer != LINK_KIND_CONSUMER)
        return;
    struct tg_gw_session *s = session_of_inbound(f, l, ch);
    if (!s || !tg_gw_session_up(s))
        return;
    struct link_channel *next = channel_of_conn(f, tg_gw_session_up(s));
    if (next) {
        if (tg_link_channel_send_lost(next, key) == 0)
            tg_info(LOG, "session %llu: its link is gone; node %s is asked to keep the tracing session under key "
                         "\"%s\"",
                    (unsigned long long)tg_gw_session_id(s), next->node, key);
        else
            tg_warn(LOG, "session %llu: its link is gone, and node %s (through %s) cannot be asked to keep the "
                         "tracing session (it does not take LOST records): it ends with the channel",
                    (unsigned long long)tg_gw_session_id(s), next->node, next->link->peer_name);
        return; /* the session closes with its client; the LOST record goes before the channel's end */
    }
    uint32_t sid = tg_gw_session_service_id(s, "ConsumerPort");
    uint32_t mid = tg_gw_session_method_id(s, "ConsumerPort", "Detach");
    struct lost_channel *lc = calloc(1, sizeof *lc);
    if (!sid || !mid || !lc) {
        free(lc);
        return;
    }
    snprintf(lc->key, sizeof lc->key, "%s", key);
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    dr.key = lc->key;
    uint8_t buf[160];
    size_t n = perfetto__protos__detach_request__get_packed_size(&dr);
    if (n > sizeof buf) {
        free(lc);
        return;
    }
    perfetto__protos__detach_request__pack(&dr, buf);
    /* the client's end closes now: hold its reads so the session lives until the reply */
    tg_gw_session_hold_down(s, 1);
    if (tg_gw_session_call_up(s, sid, mid, buf, n, -1, on_lost_detach_reply, lc) != 0) {
        tg_gw_session_hold_down(s, 0);
        free(lc);
    }
}

/* Toward the client: the far end of consumer channel ch, which this node opened, is gone for good;
 * the node it led to keeps its tracing session under key. A federated session's fan-out marks the
 * node lost; a session whose client came over another link passes the key back in a LOST record;
 * otherwise the key is logged for the local client. */
static void lost_toward_client(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, const char *key,
                               uint64_t down_since_us)
{
    if (ch->inbound || ch->producer != LINK_KIND_CONSUMER)
        return;
    if (tg_fleet_fanout(f) && tg_fanout_channel_lost(tg_fleet_fanout(f), l->peer_name, ch->id, key, down_since_us) > 0)
        return;
    struct tg_gw_session *s = session_over(f, ch);
    struct link_channel *back = s ? channel_of_conn(f, tg_gw_session_down(s)) : NULL;
    if (back && tg_link_channel_send_lost(back, key) == 0) {
        tg_info(LOG, "session %llu: node %s keeps its tracing session under key \"%s\"; %s is told",
                (unsigned long long)tg_gw_session_id(s), ch->node, key, back->link->peer_name);
        return;
    }
    tg_warn(LOG, "link %s: channel %llx: if it owned a tracing session on %s, that node keeps it under key "
                 "\"%s\" (tracectl --node %s attach URL %s)",
            l->peer_name, (unsigned long long)ch->id, ch->node, key, ch->node, key);
}

void tg_fleet_detach_channel(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch)
{
    char key[128];
    tg_fleet_detach_key(l->peer_name, ch->id, key, sizeof key);
    lost_toward_service(f, l, ch, key);
}

void tg_fleet_channel_lost(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch)
{
    char key[128];
    tg_fleet_detach_key(tg_fleet_node_name(f), ch->id, key, sizeof key);
    lost_toward_client(f, l, ch, key, l->down_since_us);
}

void tg_fleet_channel_lost_record(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, const char *key)
{
    tg_info(LOG, "link %s: channel %llx: the far end was lost past a resume window (key \"%s\")", l->peer_name,
            (unsigned long long)ch->id, key);
    if (ch->inbound)
        lost_toward_service(f, l, ch, key);
    else
        lost_toward_client(f, l, ch, key, tg_mono_us());
}
