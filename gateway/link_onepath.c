/* link_onepath.c: OnePath spans and ATTACH records for a link's channels (link_onepath.h). */
#include "link_onepath.h"

#include <stdio.h>
#include <string.h>

#include "link_int.h"
#include "link_wire.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"

int tg_link_op_on(void) { return onepath_trace_enabled() || onepath_metrics_enabled(); }

/* What an IPC frame is, from its first bytes (the frame's 4-byte header included): the IPC host's
 * own lenient reading (tg_frame_scan_prefix); a frame those bytes do not decide is "ipc.frame". */
struct frame_facts {
    const char *kind;
    uint64_t request_id;
    uint64_t method_id;
    int has_method;
};

static void facts_of(const uint8_t *frame, size_t have, size_t len, struct frame_facts *ff)
{
    static const char *const kinds[] = {"ipc.frame", "ipc.frame", "ipc.frame", "ipc.BindService",
                                        "ipc.BindServiceReply", "ipc.InvokeMethod", "ipc.InvokeMethodReply",
                                        "ipc.RequestError", "ipc.SetPeerIdentity"};
    memset(ff, 0, sizeof *ff);
    ff->kind = "ipc.frame";
    struct tg_frame_info fi;
    if (have < 4 || len < 4 || tg_frame_scan_prefix(frame + 4, have - 4, len - 4, &fi, 0) != 0)
        return;
    ff->request_id = fi.request_id;
    if ((unsigned)fi.msg < sizeof kinds / sizeof kinds[0])
        ff->kind = kinds[fi.msg];
    if (fi.msg == TG_MSG_INVOKE_METHOD) {
        ff->method_id = fi.method_id;
        ff->has_method = 1;
    }
}

static void set_common(onepath_span_t sp, const struct link_channel *ch, const struct frame_facts *ff, size_t len)
{
    char id[24];
    snprintf(id, sizeof id, "%llx", (unsigned long long)ch->id);
    onepath_span_set_attr_str(sp, "link.channel", id);
    onepath_span_set_attr_str(sp, "link.self", ch->link ? tg_fleet_node_name(ch->link->fleet) : "");
    onepath_span_set_attr_str(sp, "link.peer", ch->link ? ch->link->peer_name : "");
    onepath_span_set_attr_str(sp, "link.node", ch->node);
    onepath_span_set_attr_str(sp, "link.port", link_kind_name(ch->producer));
    onepath_span_set_attr_i64(sp, "ipc.request_id", (int64_t)ff->request_id);
    if (ff->has_method)
        onepath_span_set_attr_i64(sp, "ipc.method_id", (int64_t)ff->method_id);
    onepath_span_set_attr_i64(sp, "messaging.message.body.size", (int64_t)len);
}

void tg_link_op_channel_open(struct link_channel *ch, const char *traceparent, char out[56])
{
    out[0] = 0;
    if (!onepath_trace_enabled())
        return;
    onepath_trace_ctx_t parent;
    int has_parent = traceparent && traceparent[0] && onepath_trace_ctx_from_string(traceparent, &parent) == ONEPATH_OK;
    onepath_span_t sp = onepath_span_start("link.channel.open", ch->inbound ? ONEPATH_SPAN_KIND_SERVER
                                                                            : ONEPATH_SPAN_KIND_CLIENT,
                                           has_parent ? &parent : NULL);
    if (!sp)
        return;
    struct frame_facts none = {.kind = ""};
    set_common(sp, ch, &none, 0);
    if (ch->principal[0])
        onepath_span_set_attr_str(sp, "enduser.id", ch->principal);
    ch->op.has_ctx = onepath_trace_current_ctx(&ch->op.ctx);
    if (ch->op.has_ctx)
        onepath_trace_ctx_to_string(&ch->op.ctx, out);
    onepath_span_end(sp);
}

size_t tg_link_op_send(struct link_channel *ch, const uint8_t *frame, size_t have, size_t len, uint8_t *rec)
{
    if (!tg_link_op_on())
        return 0;
    onepath_span_t sp = NULL;
    if (onepath_trace_enabled()) {
        struct frame_facts ff;
        facts_of(frame, have, len, &ff);
        /* the side that opened the channel asks, the other answers */
        sp = onepath_span_start(ff.kind, ch->inbound ? ONEPATH_SPAN_KIND_PRODUCER : ONEPATH_SPAN_KIND_CLIENT,
                                ch->op.has_ctx ? &ch->op.ctx : NULL);
        if (!sp)
            return 0;
        set_common(sp, ch, &ff, len);
    }
    /* metrics alone: only the send time travels, for the receiver's onepath.e2e.latency */
    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_traceparent = sp && onepath_trace_current_ctx(&t.traceparent);
    t.has_send_ts = 1;
    t.send_ts_ns = tg_real_ns();
    size_t tl = 0, hl = 0;
    uint8_t tlv[ONEPATH_ATTACH_OVERHEAD];
    if (onepath_tlv_encode(&t, tlv, sizeof tlv, &tl) == ONEPATH_OK) {
        hl = tg_link_rec_header(rec, TG_LINK_REC_ATTACH, tl);
        memcpy(rec + hl, tlv, tl);
    } else {
        tl = 0;
    }
    if (sp)
        onepath_span_end(sp);
    return tl ? hl + tl : 0;
}

void tg_link_op_attach(struct link_channel *ch, const uint8_t *att, size_t len)
{
    if (len > sizeof ch->op.att) {
        ch->op.att_len = 0; /* not ours (or a newer, bigger one): the frame goes on without it */
        return;
    }
    memcpy(ch->op.att, att, len);
    ch->op.att_len = len;
}

void tg_link_op_recv(struct link_channel *ch, const uint8_t *frame, size_t have, size_t len)
{
    if (!tg_link_op_on()) {
        ch->op.att_len = 0;
        return;
    }
    onepath_recv_t r;
    memset(&r, 0, sizeof r);
    onepath_recv(&r, ch->op.att_len ? ch->op.att : NULL, ch->op.att_len, len); /* counts the metrics */
    ch->op.att_len = 0;
    if (!onepath_trace_enabled())
        return;
    struct frame_facts ff;
    facts_of(frame, have, len, &ff);
    onepath_span_t sp = onepath_span_start(ff.kind, ch->inbound ? ONEPATH_SPAN_KIND_SERVER : ONEPATH_SPAN_KIND_CONSUMER,
                                           r.has_parent ? &r.parent : (ch->op.has_ctx ? &ch->op.ctx : NULL));
    if (!sp)
        return;
    set_common(sp, ch, &ff, len);
    if (r.e2e_ns >= 0)
        onepath_span_set_attr_i64(sp, "onepath.e2e_ns", r.e2e_ns);
    onepath_span_end(sp);
}
