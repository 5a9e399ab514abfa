/* fuzz_kcdata.c: fuzz target for KCDATA: the validating iterator and every accessor on what it
 * returns, the text and JSON printers (which must agree with the validator), the node
 * descriptor and stats decoders (a decoded descriptor must re-encode and decode to the same
 * thing), and the encoder driven by the input as a script (whatever it finishes must validate).
 * Must never crash, leak, or trip ASan/UBSan. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink(void)
{
    static FILE *f;
    if (!f)
        f = fopen("/dev/null", "w");
    if (!f)
        __builtin_trap();
    return f;
}

/* Touches every field of every defined record the iterator hands out. */
static void read_records(const struct tg_kcdata_typedef *td, const uint8_t *rec, size_t len)
{
    for (uint32_t i = 0; td && i < td->nfields; i++) {
        struct tg_kcdata_field f;
        if (tg_kcdata_typedef_field(td, i, &f) != 0)
            __builtin_trap();
        char s[64];
        uint64_t u;
        int64_t v;
        tg_kcdata_field_string(&f, rec, len, s, sizeof s);
        for (uint32_t k = 0; k < f.count && k < 4; k++) {
            tg_kcdata_field_uint(&f, rec, len, k, &u);
            tg_kcdata_field_int(&f, rec, len, k, &v);
        }
        if (tg_kcdata_typedef_find(td, f.name, &f) != 0)
            __builtin_trap(); /* a field is found by its own name */
    }
}

static int walk(const uint8_t *data, size_t size)
{
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    if (tg_kcdata_iter_init(&it, data, size, TG_KCDATA_ANY_MAGIC, err, sizeof err) != 0)
        return -1;
    int rc;
    while ((rc = tg_kcdata_iter_next(&it, &item, err, sizeof err)) == 1) {
        if (item.offset + 16 + item.size > size || item.data + item.len > data + size)
            __builtin_trap(); /* an item outside the buffer */
        if (item.kind == TG_KCDATA_KIND_DATA)
            read_records(item.u.data.td, item.data, item.len);
        else if (item.kind == TG_KCDATA_KIND_TYPEDEF)
            read_records(&item.u.td, item.data, 0);
        else if (item.kind == TG_KCDATA_KIND_ARRAY)
            for (uint32_t i = 0; i < item.u.array.count && i < 8; i++)
                read_records(item.u.array.td, item.data + (size_t)i * item.u.array.elem_size,
                             item.u.array.elem_size);
        else if (item.kind == TG_KCDATA_KIND_DESC && strlen(item.u.desc.name) >= TG_KCDATA_NAME_LEN)
            __builtin_trap();
    }
    return rc;
}

static int same_desc(const struct tg_node_desc *a, const struct tg_node_desc *b)
{
    if (strcmp(a->name, b->name) || strcmp(a->version, b->version) || a->machine_id != b->machine_id ||
        a->ncaps != b->ncaps || a->nclocks != b->nclocks)
        return 0;
    for (size_t i = 0; i < a->ncaps; i++)
        if (strcmp(a->caps[i], b->caps[i]))
            return 0;
    for (size_t i = 0; i < a->nclocks; i++)
        if (a->clocks[i].clock_id != b->clocks[i].clock_id || a->clocks[i].ns != b->clocks[i].ns)
            return 0;
    return 1;
}

/* The input as an encoder script: each byte picks an operation, following bytes its arguments. */
static void drive_encoder(const uint8_t *data, size_t size)
{
    struct tg_kcdata_enc e;
    uint8_t fixed[512];
    int use_fixed = size && (data[0] & 0x80);
    if (use_fixed ? tg_kcdata_enc_init_buf(&e, TG_KCDATA_MAGIC, fixed, 32 + data[0] % 200 * 2)
                  : tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC))
        return;
    static const struct tg_kcdata_field fields[] = {
        {0, TG_KCDATA_ST_UINT32, 0, 1, "a"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 4, 6, "b"},
    };
    uint64_t ids[64];
    unsigned depth = 0;
    char name[40];
    for (size_t i = 1; i < size && i < 400; i++) {
        uint8_t op = data[i], arg = i + 1 < size ? data[i + 1] : 0;
        size_t avail = size - i - 1, n = arg % 48 < avail ? arg % 48 : avail;
        snprintf(name, sizeof name, "n%.*s", (int)(arg % 36), "abcdefghijklmnopqrstuvwxyz0123456789");
        switch (op % 10) {
        case 0: tg_kcdata_add_u64(&e, name, arg); break;
        case 1: tg_kcdata_add_binary(&e, name, data + i + 1, n); break;
        case 2: tg_kcdata_add(&e, 0x7300 + arg % 3, data + i + 1, n); break;
        case 3: tg_kcdata_add_array(&e, 0x7300 + arg % 3, 1 + arg % 5, (uint32_t)(n / (1 + arg % 5)), data + i + 1); break;
        case 4:
            if (tg_kcdata_container_begin(&e, 0x7100, arg) == 0 && depth < 64)
                ids[depth++] = arg;
            break;
        case 5:
            if (depth && tg_kcdata_container_end(&e, ids[depth - 1]) == 0)
                depth--;
            break;
        case 6: tg_kcdata_add_typedef(&e, 0x7300 + arg % 3, "t", fields, 1 + arg % 2); break;
        case 7: tg_kcdata_add_i32(&e, name, -(int32_t)arg); break;
        case 8: tg_kcdata_container_end(&e, arg); break; /* often mismatched: must be refused */
        default: tg_kcdata_add_string(&e, name, "s"); break;
        }
    }
    while (depth && tg_kcdata_container_end(&e, ids[depth - 1]) == 0)
        depth--;
    uint8_t *out;
    size_t len;
    if (tg_kcdata_finish(&e, &out, &len) == 0) {
        char err[256];
        if (tg_kcdata_validate(out, len, TG_KCDATA_MAGIC, err, sizeof err) != 0)
            __builtin_trap(); /* the encoder wrote something its own reader refuses */
        if (!use_fixed)
            free(out);
    }
    tg_kcdata_enc_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    int walked = walk(data, size);
    int valid = tg_kcdata_validate(data, size, TG_KCDATA_ANY_MAGIC, err, sizeof err);
    if ((walked == 0) != (valid == 0))
        __builtin_trap();
    if ((tg_kcdata_print(sink(), data, size, TG_KCDATA_PRINT_OFFSETS | TG_KCDATA_PRINT_HEX, err, sizeof err) == 0) !=
        (valid == 0))
        __builtin_trap(); /* the printer and the validator disagree */
    if ((tg_kcdata_print_json(sink(), data, size, err, sizeof err) == 0) != (valid == 0))
        __builtin_trap();

    struct tg_node_desc d, again;
    if (tg_node_desc_decode(data, size, &d, err, sizeof err) == 0) {
        uint8_t *buf;
        size_t len;
        if (tg_node_desc_encode(&d, &buf, &len, err, sizeof err) != 0)
            __builtin_trap(); /* a decoded descriptor must be encodable */
        if (tg_node_desc_decode(buf, len, &again, err, sizeof err) != 0 || !same_desc(&d, &again))
            __builtin_trap();
        free(buf);
    }
    tg_kcdata_stats_decode(data, size, NULL, NULL, err, sizeof err);
    drive_encoder(data, size);
    return 0;
}
