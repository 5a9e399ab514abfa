/* node.c: tracegate's node descriptor (struct tg_node_desc) to and from KCDATA: type
 * definitions for the identity, clock reading and capability types, a node container, and a
 * decoder that reads fields by name from the definitions found in the buffer. */
#include <string.h>
#include <time.h>

#include "kcdata/kcdata_int.h"
#include "tracegate/errbuf.h"
#include "tracegate/kcdata_node.h"

#define IDENTITY_SIZE 200u /* machine_id 8 + name 128 + version 64 */
#define CLOCK_SIZE 12u     /* clock_id 4 + ns 8, packed */
#define NODE_CONTAINER_ID 1u

static const struct tg_kcdata_field k_identity[] = {
    {0, TG_KCDATA_ST_UINT64, 0, 1, "machine_id"},
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 8, TG_NODE_NAME_MAX, "name"},
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 8 + TG_NODE_NAME_MAX, TG_NODE_VERSION_MAX, "version"},
};
static const struct tg_kcdata_field k_clock[] = {
    {0, TG_KCDATA_ST_UINT32, 0, 1, "clock_id"},
    {0, TG_KCDATA_ST_UINT64, 4, 1, "ns"},
};
static const struct tg_kcdata_field k_cap[] = {
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 0, TG_KCDATA_NAME_LEN, "name"},
};

/* NULL when cap is a valid capability name, else why not. */
static const char *cap_problem(const char *cap, size_t max)
{
    size_t n = 0;
    for (; n < max && cap[n]; n++) {
        char c = cap[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return "has a character outside [A-Za-z0-9._-]";
    }
    if (n == 0)
        return "is empty";
    if (n >= TG_KCDATA_NAME_LEN || n == max)
        return "is longer than 31 characters";
    return NULL;
}

int tg_node_desc_has_cap(const struct tg_node_desc *d, const char *cap)
{
    for (size_t i = 0; i < d->ncaps && i < TG_NODE_MAX_CAPS; i++)
        if (strncmp(d->caps[i], cap, TG_KCDATA_NAME_LEN) == 0)
            return 1;
    return 0;
}

int tg_node_desc_add_cap(struct tg_node_desc *d, const char *cap, char *err, size_t errlen)
{
    const char *why = cap ? cap_problem(cap, TG_KCDATA_NAME_LEN) : "is NULL";
    if (why)
        return tg_errf(err, errlen, "capability '%.31s' %s", cap ? cap : "", why);
    if (tg_node_desc_has_cap(d, cap))
        return 0;
    if (d->ncaps >= TG_NODE_MAX_CAPS)
        return tg_errf(err, errlen, "more than %d capabilities", TG_NODE_MAX_CAPS);
    snprintf(d->caps[d->ncaps++], TG_KCDATA_NAME_LEN, "%s", cap);
    return 0;
}

static uint64_t ts_ns(const struct timespec *ts) { return (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec; }

int tg_node_desc_read_clocks(struct tg_node_desc *d)
{
    uint64_t best_spread = UINT64_MAX;
    struct tg_node_clock best[4];
    for (int attempt = 0; attempt < 3; attempt++) {
        struct timespec m0, boot, real, raw, m1;
        if (clock_gettime(CLOCK_MONOTONIC, &m0) || clock_gettime(CLOCK_BOOTTIME, &boot) ||
            clock_gettime(CLOCK_REALTIME, &real) || clock_gettime(CLOCK_MONOTONIC_RAW, &raw) ||
            clock_gettime(CLOCK_MONOTONIC, &m1))
            return -1;
        uint64_t a = ts_ns(&m0), b = ts_ns(&m1);
        if (b - a >= best_spread)
            continue;
        best_spread = b - a;
        best[0] = (struct tg_node_clock){TG_NODE_CLOCK_BOOTTIME, ts_ns(&boot)};
        best[1] = (struct tg_node_clock){TG_NODE_CLOCK_REALTIME, ts_ns(&real)};
        best[2] = (struct tg_node_clock){TG_NODE_CLOCK_MONOTONIC, a + (b - a) / 2};
        best[3] = (struct tg_node_clock){TG_NODE_CLOCK_MONOTONIC_RAW, ts_ns(&raw)};
    }
    memcpy(d->clocks, best, sizeof best);
    d->nclocks = 4;
    return 0;
}

int tg_node_desc_clock(const struct tg_node_desc *d, uint32_t clock_id, uint64_t *ns)
{
    for (size_t i = 0; i < d->nclocks && i < TG_NODE_MAX_CLOCKS; i++)
        if (d->clocks[i].clock_id == clock_id) {
            *ns = d->clocks[i].ns;
            return 0;
        }
    return -1;
}

int tg_node_desc_add(struct tg_kcdata_enc *e, const struct tg_node_desc *d)
{
    if (e->failed)
        return -1;
    if (!memchr(d->name, 0, sizeof d->name) || d->name[0] == 0)
        return tg_kc_enc_fail(e, "node descriptor: name is empty or longer than %d bytes", TG_NODE_NAME_MAX - 1);
    if (!memchr(d->version, 0, sizeof d->version))
        return tg_kc_enc_fail(e, "node descriptor: version longer than %d bytes", TG_NODE_VERSION_MAX - 1);
    if (d->ncaps > TG_NODE_MAX_CAPS || d->nclocks > TG_NODE_MAX_CLOCKS)
        return tg_kc_enc_fail(e, "node descriptor: %zu capabilities / %zu clocks, at most %d / %d", d->ncaps,
                              d->nclocks, TG_NODE_MAX_CAPS, TG_NODE_MAX_CLOCKS);
    uint8_t caps[TG_NODE_MAX_CAPS * TG_KCDATA_NAME_LEN];
    memset(caps, 0, sizeof caps);
    for (size_t i = 0; i < d->ncaps; i++) {
        const char *why = cap_problem(d->caps[i], TG_KCDATA_NAME_LEN);
        if (why)
            return tg_kc_enc_fail(e, "node descriptor: capability %zu %s", i, why);
        memcpy(caps + i * TG_KCDATA_NAME_LEN, d->caps[i], strlen(d->caps[i]));
    }
    uint8_t id[IDENTITY_SIZE];
    memset(id, 0, sizeof id);
    tg_kc_st64(id, d->machine_id);
    memcpy(id + 8, d->name, strlen(d->name));
    memcpy(id + 8 + TG_NODE_NAME_MAX, d->version, strlen(d->version));
    uint8_t clocks[TG_NODE_MAX_CLOCKS * CLOCK_SIZE];
    for (size_t i = 0; i < d->nclocks; i++) {
        tg_kc_st32(clocks + i * CLOCK_SIZE, d->clocks[i].clock_id);
        tg_kc_st64(clocks + i * CLOCK_SIZE + 4, d->clocks[i].ns);
    }
    tg_kcdata_add_typedef(e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_identity, 3);
    tg_kcdata_add_typedef(e, TG_KCTYPE_CLOCK_READING, "tg_clock_reading", k_clock, 2);
    tg_kcdata_add_typedef(e, TG_KCTYPE_CAPABILITY, "tg_capability", k_cap, 1);
    tg_kcdata_container_begin(e, TG_KCCONTAINER_NODE, NODE_CONTAINER_ID);
    tg_kcdata_add(e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_add_array(e, TG_KCTYPE_CAPABILITY, TG_KCDATA_NAME_LEN, (uint32_t)d->ncaps, caps);
    tg_kcdata_add_array(e, TG_KCTYPE_CLOCK_READING, CLOCK_SIZE, (uint32_t)d->nclocks, clocks);
    return tg_kcdata_container_end(e, NODE_CONTAINER_ID);
}

int tg_node_desc_encode(const struct tg_node_desc *d, uint8_t **out, size_t *len, char *err, size_t errlen)
{
    struct tg_kcdata_enc e;
    if (tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC) != 0 || tg_node_desc_add(&e, d) != 0 ||
        tg_kcdata_finish(&e, out, len) != 0) {
        tg_errf(err, errlen, "%s", tg_kcdata_enc_error(&e));
        tg_kcdata_enc_free(&e);
        return -1;
    }
    return 0;
}

/* ---- decoding ---- */

/* Finds field name of td with an integer (want_char = 0) or char (1) element type. */
static int need_field(const struct tg_kcdata_typedef *td, const char *name, int want_char,
                      struct tg_kcdata_field *f, char *err, size_t errlen)
{
    if (tg_kcdata_typedef_find(td, name, f) != 0)
        return tg_errf(err, errlen, "node descriptor: type 0x%X has no field '%s'", td->type_id, name);
    if ((f->elem_type == TG_KCDATA_ST_CHAR) != want_char)
        return tg_errf(err, errlen, "node descriptor: field '%s' of type 0x%X is not %s", name, td->type_id,
                       want_char ? "a char array" : "an integer");
    return 0;
}

static int read_identity(const struct tg_kcdata_item *item, struct tg_node_desc *d, char *err, size_t errlen)
{
    const struct tg_kcdata_typedef *td = item->u.data.td;
    struct tg_kcdata_field f;
    if (!td)
        return tg_errf(err, errlen, "node descriptor: identity item (type 0x%X) at offset %zu has no type "
                       "definition before it", item->type, item->offset);
    if (need_field(td, "machine_id", 0, &f, err, errlen) != 0)
        return -1;
    if (tg_kcdata_field_uint(&f, item->data, item->len, 0, &d->machine_id) != 0)
        return tg_errf(err, errlen, "node descriptor: identity item too short for machine_id");
    if (need_field(td, "name", 1, &f, err, errlen) != 0)
        return -1;
    if (tg_kcdata_field_string(&f, item->data, item->len, d->name, sizeof d->name) <= 0)
        return tg_errf(err, errlen, "node descriptor: name is missing, empty or longer than %d bytes",
                       TG_NODE_NAME_MAX - 1);
    if (tg_kcdata_typedef_find(td, "version", &f) == 0) {
        if (need_field(td, "version", 1, &f, err, errlen) != 0)
            return -1;
        if (tg_kcdata_field_string(&f, item->data, item->len, d->version, sizeof d->version) < 0)
            return tg_errf(err, errlen, "node descriptor: version is missing or longer than %d bytes",
                           TG_NODE_VERSION_MAX - 1);
    }
    return 0;
}

static int read_caps(const struct tg_kcdata_item *item, struct tg_node_desc *d, char *err, size_t errlen)
{
    const struct tg_kcdata_typedef *td = item->u.array.td;
    struct tg_kcdata_field f;
    if (!td)
        return tg_errf(err, errlen, "node descriptor: capability array at offset %zu has no type definition",
                       item->offset);
    if (need_field(td, "name", 1, &f, err, errlen) != 0)
        return -1;
    for (uint32_t i = 0; i < item->u.array.count; i++) {
        char cap[TG_KCDATA_NAME_LEN];
        const uint8_t *rec = item->data + (size_t)i * item->u.array.elem_size;
        const char *why = NULL;
        if (tg_kcdata_field_string(&f, rec, item->u.array.elem_size, cap, sizeof cap) < 0)
            why = "is missing or longer than 31 characters";
        else
            why = cap_problem(cap, sizeof cap);
        if (why)
            return tg_errf(err, errlen, "node descriptor: capability %u %s", i, why);
        if (tg_node_desc_add_cap(d, cap, err, errlen) != 0)
            return -1;
    }
    return 0;
}

static int read_clocks(const struct tg_kcdata_item *item, struct tg_node_desc *d, char *err, size_t errlen)
{
    const struct tg_kcdata_typedef *td = item->u.array.td;
    struct tg_kcdata_field fid, fns;
    if (!td)
        return tg_errf(err, errlen, "node descriptor: clock array at offset %zu has no type definition",
                       item->offset);
    if (need_field(td, "clock_id", 0, &fid, err, errlen) != 0 || need_field(td, "ns", 0, &fns, err, errlen) != 0)
        return -1;
    for (uint32_t i = 0; i < item->u.array.count; i++) {
        if (d->nclocks >= TG_NODE_MAX_CLOCKS)
            return tg_errf(err, errlen, "node descriptor: more than %d clock readings", TG_NODE_MAX_CLOCKS);
        const uint8_t *rec = item->data + (size_t)i * item->u.array.elem_size;
        uint64_t id, ns;
        if (tg_kcdata_field_uint(&fid, rec, item->u.array.elem_size, 0, &id) != 0 ||
            tg_kcdata_field_uint(&fns, rec, item->u.array.elem_size, 0, &ns) != 0)
            return tg_errf(err, errlen, "node descriptor: clock reading %u is too short", i);
        if (id > UINT32_MAX)
            return tg_errf(err, errlen, "node descriptor: clock reading %u has clock id %llu", i,
                           (unsigned long long)id);
        d->clocks[d->nclocks++] = (struct tg_node_clock){(uint32_t)id, ns};
    }
    return 0;
}

static int decode(const uint8_t *buf, size_t len, struct tg_node_desc *d, char *err, size_t errlen)
{
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    if (tg_kcdata_validate(buf, len, TG_KCDATA_MAGIC, err, errlen) != 0 ||
        tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, errlen) != 0)
        return -1;
    int found = 0, inside = 0, have_identity = 0, rc;
    unsigned node_depth = 0;
    while ((rc = tg_kcdata_iter_next(&it, &item, err, errlen)) == 1) {
        if (item.kind == TG_KCDATA_KIND_CONTAINER_BEGIN && item.u.container.type == TG_KCCONTAINER_NODE) {
            if (found)
                return tg_errf(err, errlen, "node descriptor: a second node container at offset %zu", item.offset);
            found = inside = 1;
            node_depth = item.depth;
            continue;
        }
        if (!inside)
            continue;
        if (item.kind == TG_KCDATA_KIND_CONTAINER_END && item.depth == node_depth) {
            inside = 0;
            continue;
        }
        if (item.depth != node_depth + 1)
            continue; /* inside a nested container: not ours */
        if (item.kind == TG_KCDATA_KIND_DATA && item.type == TG_KCTYPE_NODE_IDENTITY) {
            if (have_identity)
                return tg_errf(err, errlen, "node descriptor: a second identity item at offset %zu", item.offset);
            have_identity = 1;
            if (read_identity(&item, d, err, errlen) != 0)
                return -1;
        } else if (item.kind == TG_KCDATA_KIND_ARRAY && item.u.array.elem_type == TG_KCTYPE_CAPABILITY) {
            if (read_caps(&item, d, err, errlen) != 0)
                return -1;
        } else if (item.kind == TG_KCDATA_KIND_ARRAY && item.u.array.elem_type == TG_KCTYPE_CLOCK_READING) {
            if (read_clocks(&item, d, err, errlen) != 0)
                return -1;
        }
        /* anything else is from a newer writer: skipped */
    }
    if (rc != 0)
        return -1;
    if (!found)
        return tg_errf(err, errlen, "no node descriptor (container 0x%X) in the buffer", TG_KCCONTAINER_NODE);
    if (!have_identity)
        return tg_errf(err, errlen, "node descriptor without an identity item (type 0x%X)", TG_KCTYPE_NODE_IDENTITY);
    return 0;
}

int tg_node_desc_decode(const uint8_t *buf, size_t len, struct tg_node_desc *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (decode(buf, len, d, err, errlen) != 0) {
        memset(d, 0, sizeof *d);
        return -1;
    }
    return 0;
}
