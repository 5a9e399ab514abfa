/* triggers.c: trigger activation (ActivateTriggers from producers,
 * TraceConfig.activate_triggers from consumers): matching against each
 * session's trigger_config (name, producer_name_regex), the trigger packets,
 * START_TRACING (start the waiting session) and STOP_TRACING (flush and stop
 * after stop_delay_ms). */
#include "service/svc.h"

#include "tracegate/log.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* Queues the trigger packet while the session's budget of unread trigger
 * bytes lasts; past it the trigger still acts but is only counted (and logged
 * once until the consumer reads). */
static void record(tg_svc_session *s, const char *name, const char *producer_name, int32_t uid, uint32_t delay)
{
    struct tg_svc_pkt *pk = tg_svc_build_trigger(s->svc, name, producer_name, uid, delay);
    if (pk && s->trigger_bytes + pk->len <= TG_SVC_MAX_TRIGGER_BYTES) {
        s->trigger_bytes += pk->len;
        tg_svc_pkt_list_append(&s->triggers, pk);
        tg_info(TG_SVC_LOG, "session %llu: trigger %s from %s", (unsigned long long)s->id, name,
                producer_name && *producer_name ? producer_name : "a consumer");
        return;
    }
    free(pk);
    s->triggers_dropped++;
    if (!s->trigger_drop_logged) {
        s->trigger_drop_logged = true;
        tg_warn(TG_SVC_LOG, "session %llu: trigger %s from %s not recorded: %u bytes of unread triggers queued",
                (unsigned long long)s->id, name, producer_name && *producer_name ? producer_name : "a consumer",
                TG_SVC_MAX_TRIGGER_BYTES);
    }
}

void tg_svc_activate_triggers(tg_service *svc, char **names, size_t n, const char *producer_name, int32_t uid)
{
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        const Perfetto__Protos__TraceConfig__TriggerConfig *tc = s->cfg ? s->cfg->trigger_config : NULL;
        if (s->read_only || !tc || !tc->has_trigger_mode ||
            (s->state != TG_SESS_CONFIGURED && s->state != TG_SESS_STARTED))
            continue;
        /* whether each trigger's producer_name_regex admits this producer: the same for every name
         * of the frame, so compiled and run once per trigger (a frame may name a trigger 40,000
         * times; a regcomp per name stalled the service loop); -1 = not asked yet */
        signed char *admits = tc->n_triggers ? malloc(tc->n_triggers) : NULL;
        if (admits)
            memset(admits, -1, tc->n_triggers);
        for (size_t i = 0; i < n; i++) {
            if (!names[i])
                continue;
            for (size_t t = 0; t < tc->n_triggers; t++) {
                const Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *tr = tc->triggers[t];
                if (!tr->name || strcmp(tr->name, names[i]) != 0)
                    continue;
                if (tr->producer_name_regex && *tr->producer_name_regex) {
                    signed char ok = admits ? admits[t] : -1;
                    if (ok < 0)
                        ok = tg_svc_regex_full_match(tr->producer_name_regex, producer_name ? producer_name : "");
                    if (admits)
                        admits[t] = ok;
                    if (!ok)
                        continue;
                }
                uint32_t delay = tr->has_stop_delay_ms ? tr->stop_delay_ms : 0;
                record(s, tr->name, producer_name, uid, delay);
                if (tc->trigger_mode == PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__START_TRACING &&
                    s->waiting_start_trigger) {
                    tg_svc_session_start(s);
                } else if (tc->trigger_mode ==
                               PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING &&
                           s->state == TG_SESS_STARTED && !evtimer_pending(s->ev_stop_delay, NULL) &&
                           !s->stop_pending) {
                    evtimer_del(s->ev_trigger_timeout);
                    tg_svc_timer_set(s->ev_stop_delay, delay);
                }
                break;
            }
        }
        free(admits);
    }
}
