/* resource.c: building the OnePath resource's NDJSON object and OTLP attribute array. */
#include "onepath/resource.h"

#include <stdlib.h>
#include <string.h>

#include "onepath/jsonbuf.h"
#include "tracegate/log.h"

static void kv_json(struct tg_op_jb *j, const char *k, size_t kl, const char *v, size_t vl)
{
    tg_op_jb_putc(j, ',');
    tg_op_jb_str(j, k, kl);
    tg_op_jb_putc(j, ':');
    tg_op_jb_str(j, v, vl);
}

static void kv_otlp(struct tg_op_jb *o, const char *k, size_t kl, const char *v, size_t vl)
{
    tg_op_jb_puts(o, ",{\"key\":");
    tg_op_jb_str(o, k, kl);
    tg_op_jb_puts(o, ",\"value\":{\"stringValue\":");
    tg_op_jb_str(o, v, vl);
    tg_op_jb_puts(o, "}}");
}

static int is_builtin(const char *k, size_t kl)
{
    static const char *const names[] = {"service.name", "host.name", "process.pid"};
    for (size_t i = 0; i < 3; i++)
        if (strlen(names[i]) == kl && memcmp(names[i], k, kl) == 0)
            return 1;
    return 0;
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

static void add_extras(struct tg_op_jb *j, struct tg_op_jb *o, const char *extra)
{
    unsigned count = 0;
    for (const char *p = extra; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        const char *k = p, *v = eq ? eq + 1 : NULL;
        size_t kl = eq ? (size_t)(eq - p) : n, vl = eq ? n - kl - 1 : 0;
        trim(&k, &kl);
        if (v)
            trim(&v, &vl);
        if (n == 0) {
            /* an empty item (",,") is ignored silently */
        } else if (!eq || kl == 0 || is_builtin(k, kl)) {
            tg_warn("onepath", "ONEPATH_TRACE_RESOURCE_ATTRIBUTES: ignoring item '%.*s' (want key=value, not "
                               "service.name, host.name or process.pid)", (int)n, p);
        } else if (count == TG_OP_MAX_RESOURCE_ATTRS) {
            tg_warn("onepath", "ONEPATH_TRACE_RESOURCE_ATTRIBUTES: more than %d items, ignoring the rest",
                    TG_OP_MAX_RESOURCE_ATTRS);
            return;
        } else {
            kv_json(j, k, kl, v, vl);
            kv_otlp(o, k, kl, v, vl);
            count++;
        }
        p = end ? end + 1 : p + n;
    }
}

int tg_op_resource_build(struct tg_op_resource *r, const char *service_name, const char *host_name, long pid,
                         const char *extra)
{
    struct tg_op_jb j, o;
    tg_op_jb_init(&j);
    tg_op_jb_init(&o);
    tg_op_jb_puts(&j, "{\"service.name\":");
    tg_op_jb_cstr(&j, service_name ? service_name : "");
    tg_op_jb_puts(&j, ",\"host.name\":");
    tg_op_jb_cstr(&j, host_name ? host_name : "");
    tg_op_jb_puts(&j, ",\"process.pid\":");
    tg_op_jb_i64(&j, pid);
    tg_op_jb_puts(&o, "[{\"key\":\"service.name\",\"value\":{\"stringValue\":");
    tg_op_jb_cstr(&o, service_name ? service_name : "");
    tg_op_jb_puts(&o, "}},{\"key\":\"host.name\",\"value\":{\"stringValue\":");
    tg_op_jb_cstr(&o, host_name ? host_name : "");
    tg_op_jb_puts(&o, "}},{\"key\":\"process.pid\",\"value\":{\"intValue\":\"");
    tg_op_jb_i64(&o, pid);
    tg_op_jb_puts(&o, "\"}}");
    add_extras(&j, &o, extra);
    tg_op_jb_putc(&j, '}');
    tg_op_jb_putc(&o, ']');
    tg_op_jb_putc(&j, 0);
    tg_op_jb_putc(&o, 0);
    if (tg_op_jb_failed(&j) || tg_op_jb_failed(&o)) {
        tg_op_jb_free(&j);
        tg_op_jb_free(&o);
        return -1;
    }
    r->json = j.p;
    r->otlp = o.p;
    return 0;
}

void tg_op_resource_free(struct tg_op_resource *r)
{
    free(r->json);
    free(r->otlp);
    r->json = r->otlp = NULL;
}
