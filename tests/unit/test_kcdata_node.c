/* test_kcdata_node.c: tracegate's node descriptor and stats snapshot in KCDATA: round trips,
 * clock readings, forward compatibility (a reader ignoring what a newer writer added, decoding
 * fields by name from the buffer's definitions), and refusal of descriptors that lie. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kcdata_test_util.h"
#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"

static void sample_desc(struct tg_node_desc *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "edge-7.example.net");
    snprintf(d->version, sizeof d->version, "0.4.1-12-gdeadbee");
    d->machine_id = 0xF00DFACE12345678ull;
    assert_int_equal(tg_node_desc_add_cap(d, "link-resume", NULL, 0), 0);
    assert_int_equal(tg_node_desc_add_cap(d, "onepath.tlv", NULL, 0), 0);
    assert_int_equal(tg_node_desc_add_cap(d, "clock_probe", NULL, 0), 0);
    d->nclocks = 4;
    d->clocks[0] = (struct tg_node_clock){TG_NODE_CLOCK_BOOTTIME, 1000};
    d->clocks[1] = (struct tg_node_clock){TG_NODE_CLOCK_REALTIME, 1700000000123456789ull};
    d->clocks[2] = (struct tg_node_clock){TG_NODE_CLOCK_MONOTONIC, 900};
    d->clocks[3] = (struct tg_node_clock){TG_NODE_CLOCK_MONOTONIC_RAW, UINT64_MAX};
}

static void assert_same_desc(const struct tg_node_desc *a, const struct tg_node_desc *b)
{
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->version, b->version);
    assert_true(a->machine_id == b->machine_id);
    assert_int_equal(a->ncaps, b->ncaps);
    for (size_t i = 0; i < a->ncaps; i++)
        assert_string_equal(a->caps[i], b->caps[i]);
    assert_int_equal(a->nclocks, b->nclocks);
    for (size_t i = 0; i < a->nclocks; i++) {
        assert_int_equal(a->clocks[i].clock_id, b->clocks[i].clock_id);
        assert_true(a->clocks[i].ns == b->clocks[i].ns);
    }
}

static void test_node_roundtrip(void **state)
{
    (void)state;
    struct tg_node_desc d, back;
    sample_desc(&d);
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), 0);
    assert_memory_equal(buf, "TGKC", 4);
    assert_int_equal(tg_node_desc_decode(buf, len, &back, err, sizeof err), 0);
    assert_same_desc(&d, &back);
    assert_true(tg_node_desc_has_cap(&back, "onepath.tlv"));
    assert_false(tg_node_desc_has_cap(&back, "onepath"));
    uint64_t ns = 0;
    assert_int_equal(tg_node_desc_clock(&back, TG_NODE_CLOCK_REALTIME, &ns), 0);
    assert_true(ns == 1700000000123456789ull);
    assert_int_equal(tg_node_desc_clock(&back, 9, &ns), -1);

    /* a generic printer shows every field by name */
    int rc;
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(text, "container 0x7400 (tg_node) id 1 {\n"
                                 "  tg_node_identity (0x7401) {\n"
                                 "    uint64 machine_id = 17297757506775570040 (0xf00dface12345678)\n"
                                 "    char name[128] = \"edge-7.example.net\"\n"
                                 "    char version[64] = \"0.4.1-12-gdeadbee\"\n"
                                 "  }\n"
                                 "  array of 3 tg_capability (0x7403), 32 bytes each [\n"
                                 "    [0] \"link-resume\"\n"
                                 "    [1] \"onepath.tlv\"\n"
                                 "    [2] \"clock_probe\"\n"
                                 "  ]\n"
                                 "  array of 4 tg_clock_reading (0x7402), 12 bytes each [\n"
                                 "    [0] { clock_id = 6, ns = 1000 (0x3e8) }\n"));
    free(text);
    free(buf);

    /* minimal: no version, capabilities or clocks */
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "n");
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), 0);
    assert_int_equal(tg_node_desc_decode(buf, len, &back, err, sizeof err), 0);
    assert_same_desc(&d, &back);
    free(buf);
    /* longest name and version */
    memset(d.name, 'n', TG_NODE_NAME_MAX - 1);
    memset(d.version, 'v', TG_NODE_VERSION_MAX - 1);
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), 0);
    assert_int_equal(tg_node_desc_decode(buf, len, &back, err, sizeof err), 0);
    assert_same_desc(&d, &back);
    free(buf);
}

static void test_node_clocks(void **state)
{
    (void)state;
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    assert_int_equal(tg_node_desc_read_clocks(&d), 0);
    clock_gettime(CLOCK_MONOTONIC, &after);
    assert_int_equal(d.nclocks, 4);
    uint64_t boot, real, mono, raw;
    assert_int_equal(tg_node_desc_clock(&d, TG_NODE_CLOCK_BOOTTIME, &boot), 0);
    assert_int_equal(tg_node_desc_clock(&d, TG_NODE_CLOCK_REALTIME, &real), 0);
    assert_int_equal(tg_node_desc_clock(&d, TG_NODE_CLOCK_MONOTONIC, &mono), 0);
    assert_int_equal(tg_node_desc_clock(&d, TG_NODE_CLOCK_MONOTONIC_RAW, &raw), 0);
    uint64_t b = (uint64_t)before.tv_sec * 1000000000u + (uint64_t)before.tv_nsec;
    uint64_t a = (uint64_t)after.tv_sec * 1000000000u + (uint64_t)after.tv_nsec;
    assert_true(mono >= b && mono <= a);
    assert_true(boot >= b); /* BOOTTIME runs ahead of MONOTONIC (it also counts suspend) */
    assert_true(real > 1577836800ull * 1000000000u); /* after 2020 */
    assert_true(raw > 0);
}

/* What a newer writer might send: extra items in the node container (a described value, a new
 * type with its definition, a nested container of its own), an identity whose definition grew
 * a field and moved the others, and a capability type with an extra field. */
static uint8_t *newer_writer(size_t *len)
{
    static const struct tg_kcdata_field identity_v2[] = {
        {0, TG_KCDATA_ST_UINT32, 0, 1, "boot_seq"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 4, 64, "version"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 68, 200, "name"},
        {0, TG_KCDATA_ST_UINT64, 268, 1, "machine_id"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_UINT8, 276, 16, "boot_uuid"},
    };
    static const struct tg_kcdata_field cap_v2[] = {
        {0, TG_KCDATA_ST_UINT8, 0, 1, "level"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 1, 32, "name"},
    };
    static const struct tg_kcdata_field region[] = {{TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 0, 16, "region"}};
    static const struct tg_kcdata_field clock_v2[] = {
        {0, TG_KCDATA_ST_UINT64, 0, 1, "ns"},
        {0, TG_KCDATA_ST_UINT64, 8, 1, "clock_id"},
        {0, TG_KCDATA_ST_UINT64, 16, 1, "uncertainty_ns"},
    };
    uint8_t id[292];
    memset(id, 0, sizeof id);
    id[0] = 3;
    memcpy(id + 4, "9.9.9", 5);
    memcpy(id + 68, "future-node", 11);
    for (int i = 0; i < 8; i++)
        id[268 + i] = (uint8_t)(0x11 * (i + 1));
    memset(id + 276, 0xAB, 16);
    uint8_t caps[2 * 33];
    memset(caps, 0, sizeof caps);
    caps[0] = 2, memcpy(caps + 1, "link-resume", 11);
    caps[33] = 1, memcpy(caps + 34, "zstd", 4);
    uint8_t clocks[24];
    memset(clocks, 0, sizeof clocks);
    clocks[0] = 0x10, clocks[8] = TG_NODE_CLOCK_BOOTTIME, clocks[16] = 5;

    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", identity_v2, 5);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_CAPABILITY, "tg_capability", cap_v2, 2);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_CLOCK_READING, "tg_clock_reading", clock_v2, 3);
    tg_kcdata_add_typedef(&e, 0x7420, "tg_node_region", region, 1);
    tg_kcdata_add_string(&e, "outside", "items outside the node container are ignored");
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add_u64(&e, "uptime_s", 86400);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_add(&e, 0x7420, "eu-west\0\0\0\0\0\0\0\0\0", 16);
    tg_kcdata_container_begin(&e, 0x7421, 9);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id); /* nested: not the node's own */
    tg_kcdata_container_end(&e, 9);
    tg_kcdata_add_array(&e, TG_KCTYPE_CAPABILITY, 33, 2, caps);
    tg_kcdata_add_array(&e, TG_KCTYPE_CLOCK_READING, 24, 1, clocks);
    tg_kcdata_add_array(&e, 0x7422, 4, 2, "abcdefgh"); /* an array of an unknown type */
    tg_kcdata_container_end(&e, 1);
    uint8_t *out;
    assert_int_equal(tg_kcdata_finish(&e, &out, len), 0);
    return out;
}

static void test_node_forward_compat(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = newer_writer(&len);
    struct tg_node_desc d;
    char err[256] = "";
    if (tg_node_desc_decode(buf, len, &d, err, sizeof err) != 0) {
        print_error("decode: %s\n", err);
        fail();
    }
    assert_string_equal(d.name, "future-node");
    assert_string_equal(d.version, "9.9.9");
    assert_true(d.machine_id == 0x8877665544332211ull);
    assert_int_equal(d.ncaps, 2);
    assert_string_equal(d.caps[0], "link-resume");
    assert_string_equal(d.caps[1], "zstd");
    assert_int_equal(d.nclocks, 1);
    assert_int_equal(d.clocks[0].clock_id, TG_NODE_CLOCK_BOOTTIME);
    assert_int_equal(d.clocks[0].ns, 0x10);
    /* and today's printer shows what the decoder skipped */
    int rc;
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(text, "  uint64 uptime_s = 86400 (0x15180)\n"));
    assert_non_null(strstr(text, "  tg_node_region (0x7420) = \"eu-west\"\n"));
    assert_non_null(strstr(text, "    uint8 boot_uuid[16] = [171, 171,"));
    assert_non_null(strstr(text, "    [0] { level = 2, name = \"link-resume\" }\n"));
    assert_non_null(strstr(text, "    [0] { ns = 16 (0x10), clock_id = 6, uncertainty_ns = 5 }\n"));
    free(text);
    free(buf);
}

/* A buffer from an encoder the test drives, for descriptors that lie. */
struct lie {
    struct tg_kcdata_enc e;
};

static void lie_expect(struct tg_kcdata_enc *e, const char *needle)
{
    uint8_t *buf;
    size_t len;
    if (tg_kcdata_finish(e, &buf, &len) != 0) {
        print_error("encoder: %s\n", tg_kcdata_enc_error(e));
        fail();
    }
    struct tg_node_desc d;
    char err[256] = "";
    int rc = tg_node_desc_decode(buf, len, &d, err, sizeof err);
    if (rc != -1 || !strstr(err, needle)) {
        print_error("expected a refusal containing [%s], got rc %d [%s]\n", needle, rc, err);
        fail();
    }
    /* nothing half-decoded is left behind */
    assert_int_equal(d.name[0], 0);
    assert_int_equal(d.ncaps, 0);
    free(buf);
}

static const struct tg_kcdata_field k_id_fields[] = {
    {0, TG_KCDATA_ST_UINT64, 0, 1, "machine_id"},
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 8, 128, "name"},
};

static void test_node_refusals(void **state)
{
    (void)state;
    struct tg_kcdata_enc e;
    uint8_t id[136];
    memset(id, 0, sizeof id);
    memcpy(id + 8, "x", 1);

    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_u64(&e, "not a node", 1);
    lie_expect(&e, "no node descriptor (container 0x7400) in the buffer");

    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "without an identity item");

    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "has no type definition before it");

    /* name is not a char array */
    static const struct tg_kcdata_field bad_name[] = {
        {0, TG_KCDATA_ST_UINT64, 0, 1, "machine_id"},
        {0, TG_KCDATA_ST_UINT64, 8, 1, "name"},
    };
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", bad_name, 2);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "field 'name' of type 0x7401 is not a char array");

    /* machine_id missing from the definition */
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields + 1, 1);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "type 0x7401 has no field 'machine_id'");

    /* an identity item shorter than its definition */
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields, 2);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, 4);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "identity item too short for machine_id");

    /* a name longer than this reader holds (a definition with a bigger field) */
    static const struct tg_kcdata_field long_name[] = {
        {0, TG_KCDATA_ST_UINT64, 0, 1, "machine_id"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 8, 300, "name"},
    };
    uint8_t big[308];
    memset(big, 'a', sizeof big);
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", long_name, 2);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, big, sizeof big);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "name is missing, empty or longer than 127 bytes");

    /* an empty name */
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields, 2);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    memset(id + 8, 0, 128);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "name is missing, empty");
    memcpy(id + 8, "x", 1);

    /* two node containers, two identities */
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields, 2);
    for (uint64_t i = 1; i <= 2; i++) {
        tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, i);
        tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
        tg_kcdata_container_end(&e, i);
    }
    lie_expect(&e, "a second node container at offset");
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields, 2);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "a second identity item");

    /* capabilities: a bad name, too many */
    static const struct tg_kcdata_field capf[] = {{TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 0, 32, "name"}};
    uint8_t caps[(TG_NODE_MAX_CAPS + 1) * 32];
    memset(caps, 0, sizeof caps);
    memcpy(caps, "has space", 9);
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields, 2);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_CAPABILITY, "tg_capability", capf, 1);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_add_array(&e, TG_KCTYPE_CAPABILITY, 32, 1, caps);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "capability 0 has a character outside [A-Za-z0-9._-]");
    for (int i = 0; i <= TG_NODE_MAX_CAPS; i++)
        snprintf((char *)caps + i * 32, 32, "cap%d", i);
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_NODE_IDENTITY, "tg_node_identity", k_id_fields, 2);
    tg_kcdata_add_typedef(&e, TG_KCTYPE_CAPABILITY, "tg_capability", capf, 1);
    tg_kcdata_container_begin(&e, TG_KCCONTAINER_NODE, 1);
    tg_kcdata_add(&e, TG_KCTYPE_NODE_IDENTITY, id, sizeof id);
    tg_kcdata_add_array(&e, TG_KCTYPE_CAPABILITY, 32, TG_NODE_MAX_CAPS + 1, caps);
    tg_kcdata_container_end(&e, 1);
    lie_expect(&e, "more than 64 capabilities");

    /* a malformed buffer is refused as a whole, even after a good node container */
    struct tg_node_desc d;
    sample_desc(&d);
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), 0);
    assert_int_equal(tg_node_desc_decode(buf, len - 1, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    memcpy(buf, "\x57\xF1\xAD\xDE", 4); /* crash info */
    assert_int_equal(tg_node_desc_decode(buf, len, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "begin magic 0xDEADF157 (crash info) is not the expected 0x434B4754"));
    free(buf);
}

static void test_node_encode_refusals(void **state)
{
    (void)state;
    struct tg_node_desc d;
    char err[256] = "";
    memset(&d, 0, sizeof d);
    assert_int_equal(tg_node_desc_add_cap(&d, "", err, sizeof err), -1);
    assert_string_equal(err, "capability '' is empty");
    assert_int_equal(tg_node_desc_add_cap(&d, "v2 protocol", err, sizeof err), -1);
    assert_non_null(strstr(err, "outside [A-Za-z0-9._-]"));
    assert_int_equal(tg_node_desc_add_cap(&d, "a234567890123456789012345678901x", err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 31 characters"));
    assert_int_equal(tg_node_desc_add_cap(&d, "a234567890123456789012345678901", err, sizeof err), 0);
    assert_int_equal(tg_node_desc_add_cap(&d, "a234567890123456789012345678901", err, sizeof err), 0);
    assert_int_equal(d.ncaps, 1); /* once */
    for (int i = 1; i < TG_NODE_MAX_CAPS; i++) {
        char c[16];
        snprintf(c, sizeof c, "c%d", i);
        assert_int_equal(tg_node_desc_add_cap(&d, c, err, sizeof err), 0);
    }
    assert_int_equal(tg_node_desc_add_cap(&d, "one-more", err, sizeof err), -1);
    assert_string_equal(err, "more than 64 capabilities");

    uint8_t *buf;
    size_t len;
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "name is empty"));
    memset(d.name, 'n', sizeof d.name); /* no NUL */
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 127 bytes"));
    snprintf(d.name, sizeof d.name, "ok");
    snprintf(d.caps[5], sizeof d.caps[5], "bad cap");
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "capability 5 has a character outside"));
    snprintf(d.caps[5], sizeof d.caps[5], "good");
    d.nclocks = TG_NODE_MAX_CLOCKS + 1;
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), -1);
    d.nclocks = 0;
    assert_int_equal(tg_node_desc_encode(&d, &buf, &len, err, sizeof err), 0);
    struct tg_node_desc back;
    assert_int_equal(tg_node_desc_decode(buf, len, &back, err, sizeof err), 0);
    assert_int_equal(back.ncaps, TG_NODE_MAX_CAPS);
    free(buf);
}

/* ---- stats snapshot ---- */

struct got_stats {
    size_t n;
    char names[8][32];
    uint64_t values[8];
    uint64_t ids[8];
};

static void on_stat(void *ctx, uint64_t id, const char *name, uint64_t value)
{
    struct got_stats *g = ctx;
    if (g->n < 8) {
        snprintf(g->names[g->n], sizeof g->names[g->n], "%s", name);
        g->values[g->n] = value;
        g->ids[g->n] = id;
    }
    g->n++;
}

static void test_stats_roundtrip(void **state)
{
    (void)state;
    const struct tg_kcdata_stat st[] = {
        {"sessions_active", 3}, {"bytes_upstream", 0xFFFFFFFFFFFFFFFFull}, {"frames_rejected", 0}};
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(tg_kcdata_stats_encode(st, 3, &buf, &len, err, sizeof err), 0);
    struct got_stats g;
    memset(&g, 0, sizeof g);
    assert_int_equal(tg_kcdata_stats_decode(buf, len, on_stat, &g, err, sizeof err), 3);
    assert_int_equal(g.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(g.names[i], st[i].name);
        assert_true(g.values[i] == st[i].value);
        assert_int_equal(g.ids[i], 1);
    }
    int rc;
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(text, "container 0x7410 (tg_stats) id 1 {\n"
                                 "  uint64 sessions_active = 3\n"
                                 "  uint64 bytes_upstream = 18446744073709551615 (0xffffffffffffffff)\n"
                                 "  uint64 frames_rejected = 0\n"
                                 "}\n"));
    free(text);
    free(buf);
    /* an empty snapshot */
    assert_int_equal(tg_kcdata_stats_encode(NULL, 0, &buf, &len, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_stats_decode(buf, len, NULL, NULL, err, sizeof err), 0);
    free(buf);
    /* a name that does not fit is refused, not cut */
    const struct tg_kcdata_stat bad[] = {{"an_exceedingly_long_counter_name", 1}};
    assert_int_equal(tg_kcdata_stats_encode(bad, 1, &buf, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "is 32 bytes, longer than 31"));
}

static void test_stats_among_other_items(void **state)
{
    (void)state;
    const struct tg_kcdata_stat a[] = {{"x", 1}}, b[] = {{"y", 2}, {"z", 3}};
    struct tg_node_desc d;
    sample_desc(&d);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    tg_kcdata_add_u64(&e, "not_a_stat", 9); /* outside any stats container */
    tg_node_desc_add(&e, &d);
    tg_kcdata_stats_add(&e, 7, a, 1);
    tg_kcdata_container_begin(&e, 0x7100, 1);
    tg_kcdata_stats_add(&e, 8, b, 2); /* nested in another container */
    tg_kcdata_container_begin(&e, 0x7101, 2);
    tg_kcdata_add_u64(&e, "deeper", 4); /* inside a stats container's sibling: not a stat */
    tg_kcdata_container_end(&e, 2);
    tg_kcdata_container_end(&e, 1);
    uint8_t *buf;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    struct got_stats g;
    memset(&g, 0, sizeof g);
    char err[256];
    assert_int_equal(tg_kcdata_stats_decode(buf, len, on_stat, &g, err, sizeof err), 3);
    assert_string_equal(g.names[0], "x");
    assert_int_equal(g.ids[0], 7);
    assert_string_equal(g.names[2], "z");
    assert_int_equal(g.values[2], 3);
    assert_int_equal(g.ids[2], 8);
    /* the node descriptor in the same buffer still decodes */
    struct tg_node_desc back;
    assert_int_equal(tg_node_desc_decode(buf, len, &back, err, sizeof err), 0);
    assert_same_desc(&d, &back);
    /* a malformed buffer delivers nothing */
    memset(&g, 0, sizeof g);
    assert_int_equal(tg_kcdata_stats_decode(buf, len - 16, on_stat, &g, err, sizeof err), -1);
    assert_int_equal(g.n, 0);
    assert_non_null(strstr(err, "without BUFFER_END"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_roundtrip),
        cmocka_unit_test(test_node_clocks),
        cmocka_unit_test(test_node_forward_compat),
        cmocka_unit_test(test_node_refusals),
        cmocka_unit_test(test_node_encode_refusals),
        cmocka_unit_test(test_stats_roundtrip),
        cmocka_unit_test(test_stats_among_other_items),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
