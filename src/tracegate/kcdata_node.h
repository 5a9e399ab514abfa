/* kcdata_node.h: tracegate's node descriptor in KCDATA (sent in the gateway link HELLO): node
 * name, machine id, version string, capabilities as named feature flags, and clock readings
 * taken at one instant. Encoded with type definitions, so any KCDATA printer shows every field
 * and a reader decodes fields by name from the definitions in the buffer.
 *
 * Wire shape (docs/kcdata.md): begin magic TG_KCDATA_MAGIC; type definitions for
 * TG_KCTYPE_NODE_IDENTITY, TG_KCTYPE_CLOCK_READING and TG_KCTYPE_CAPABILITY; then a container
 * of type TG_KCCONTAINER_NODE (id 1) holding one identity item, an array of capabilities and an
 * array of clock readings; BUFFER_END. Readers skip anything else inside the container (new
 * items from newer writers) and extra fields in a definition.
 *
 * Capabilities are feature names (1..31 characters from [A-Za-z0-9._-]), never a protocol
 * version number: a peer uses a feature only when both sides list it.
 *
 * struct tg_node_desc is plain data (no pointers); functions are reentrant, any thread. */
#ifndef TRACEGATE_KCDATA_NODE_H
#define TRACEGATE_KCDATA_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/kcdata.h"

/* tracegate's type ids (0x7400..0x74ff, buffers with TG_KCDATA_MAGIC). */
#define TG_KCCONTAINER_NODE 0x7400u     /* container type of a node descriptor */
#define TG_KCTYPE_NODE_IDENTITY 0x7401u /* uint64 machine_id @0, char name[128] @8, char version[64] @136 */
#define TG_KCTYPE_CLOCK_READING 0x7402u /* uint32 clock_id @0, uint64 ns @4 (packed, 12 bytes) */
#define TG_KCTYPE_CAPABILITY 0x7403u    /* char name[32] @0 */

#define TG_NODE_NAME_MAX 128    /* bytes, NUL included */
#define TG_NODE_VERSION_MAX 64  /* bytes, NUL included */
#define TG_NODE_MAX_CAPS 64
#define TG_NODE_MAX_CLOCKS 16

/* Clock ids are Perfetto's BuiltinClock numbers, so readings map onto trace clock snapshots. */
#define TG_NODE_CLOCK_REALTIME 1u
#define TG_NODE_CLOCK_MONOTONIC 3u
#define TG_NODE_CLOCK_MONOTONIC_RAW 5u
#define TG_NODE_CLOCK_BOOTTIME 6u

struct tg_node_clock {
    uint32_t clock_id;
    uint64_t ns;
};

struct tg_node_desc {
    char name[TG_NODE_NAME_MAX];
    uint64_t machine_id;
    char version[TG_NODE_VERSION_MAX];
    size_t ncaps;
    char caps[TG_NODE_MAX_CAPS][TG_KCDATA_NAME_LEN];
    size_t nclocks;
    struct tg_node_clock clocks[TG_NODE_MAX_CLOCKS];
};

/* Adds a capability (once: adding a present one is a no-op). Returns 0, or -1 for an empty,
 * too long or badly formed name, or when TG_NODE_MAX_CAPS are already listed. */
int tg_node_desc_add_cap(struct tg_node_desc *d, const char *cap, char *err, size_t errlen);
/* 1 if d lists cap. */
int tg_node_desc_has_cap(const struct tg_node_desc *d, const char *cap);
/* Replaces d's clocks with BOOTTIME, REALTIME, MONOTONIC and MONOTONIC_RAW read back to back;
 * of three attempts the one with the smallest MONOTONIC spread is kept. Returns 0 or -1. */
int tg_node_desc_read_clocks(struct tg_node_desc *d);
/* The ns reading of clock_id in d, or -1 when d has none (the value is then left alone). */
int tg_node_desc_clock(const struct tg_node_desc *d, uint32_t clock_id, uint64_t *ns);

/* Writes the type definitions and the node container into an encoder (whose magic should be
 * TG_KCDATA_MAGIC). Fails (encoder error set) for names or versions too long for their fields,
 * an empty name, or invalid capabilities. */
int tg_node_desc_add(struct tg_kcdata_enc *e, const struct tg_node_desc *d);
/* A complete buffer holding d. *out is malloc'd (caller frees). Returns 0 or -1. */
int tg_node_desc_encode(const struct tg_node_desc *d, uint8_t **out, size_t *len, char *err, size_t errlen);
/* Reads the (single) node descriptor from a buffer with TG_KCDATA_MAGIC. The whole buffer must
 * be well formed. Required: the identity item with machine_id (integer) and name (char) fields;
 * version, capabilities and clocks are optional. Unknown items, nested containers and fields
 * are skipped. Returns 0, or -1 with err filled (*d is then zeroed). */
int tg_node_desc_decode(const uint8_t *buf, size_t len, struct tg_node_desc *d, char *err, size_t errlen);

#endif
