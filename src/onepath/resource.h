/* resource.h: the OnePath resource (who exported a span: service.name, host.name, process.pid and
 * the extra attributes of $ONEPATH_TRACE_RESOURCE_ATTRIBUTES), rendered once per init into the
 * two forms the span exporters append verbatim: a JSON object for NDJSON and an OTLP attribute
 * array. Built and freed by the runtime under its lifecycle mutex; read-only afterwards. */
#ifndef TG_ONEPATH_RESOURCE_H
#define TG_ONEPATH_RESOURCE_H

#define TG_OP_MAX_RESOURCE_ATTRS 32

struct tg_op_resource {
    char *json; /* {"service.name":"...","host.name":"...","process.pid":123,...} */
    char *otlp; /* [{"key":"service.name","value":{"stringValue":"..."}},...] */
};

/* extra: "key=value,key=value" (NULL or "" for none). Keys are trimmed of blanks; an item
 * without '=', with an empty key, or naming one of the three built-in keys is skipped with a
 * warning; at most TG_OP_MAX_RESOURCE_ATTRS extras. Values are strings. Returns 0, -1 on OOM. */
int tg_op_resource_build(struct tg_op_resource *r, const char *service_name, const char *host_name, long pid,
                         const char *extra);
void tg_op_resource_free(struct tg_op_resource *r);

#endif
