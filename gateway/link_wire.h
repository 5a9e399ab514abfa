/* link_wire.h: the byte formats inside a gateway link's streams (docs/link-protocol.md §3.2, §4):
 * channel records (`u8 type | varint length | payload`) and control messages (`varint length |
 * tracegate.link.Control`). Pure functions over caller buffers; any thread. Parsers never read
 * past the end they are given and reject lengths over their limits (tests/fuzz/fuzz_link_records.c). */
#ifndef TRACEGATE_GATEWAY_LINK_WIRE_H
#define TRACEGATE_GATEWAY_LINK_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum tg_link_rec_type {
    TG_LINK_REC_IPC = 0x01,
    TG_LINK_REC_ACK = 0x02,
    TG_LINK_REC_ATTACH = 0x03,
    TG_LINK_REC_LOST = 0x04, /* the far end was lost past a resume window: a Detach key (link-protocol.md §6) */
};
#define TG_LINK_LOST_MAX 128u /* longest key a LOST record carries */

#define TG_LINK_REC_MAX (132u * 1024u)   /* an IPC frame is at most 128 KiB plus its header */
#define TG_LINK_REC_HDR_MAX 6            /* type + a varint of at most 5 bytes */
#define TG_LINK_CTL_MAX (1u << 20)       /* a control message */

/* Writes a record header for a payload of len bytes; returns its size (<= TG_LINK_REC_HDR_MAX). */
size_t tg_link_rec_header(uint8_t *out, enum tg_link_rec_type type, size_t len);

/* Parses one record at the start of buf. Returns the record's total size with *type, *payload
 * (into buf) and *plen set; 0 when more bytes are needed; -1 on a malformed record (unknown
 * type, over-long varint, payload over TG_LINK_REC_MAX, an ACK whose payload is not exactly one
 * varint). */
long tg_link_rec_parse(const uint8_t *buf, size_t len, uint8_t *type, const uint8_t **payload, size_t *plen);

/* Parses only a record's header: returns its size with *type and *plen set (the payload may not
 * have arrived yet), 0 when more bytes are needed, -1 when malformed. */
long tg_link_rec_header_parse(const uint8_t *buf, size_t len, uint8_t *type, size_t *plen);

/* ACK payload: a varint count. Returns its size. */
size_t tg_link_ack_payload(uint8_t *out, uint64_t received);
int tg_link_ack_parse(const uint8_t *payload, size_t plen, uint64_t *received);

/* Control framing: writes the varint length prefix of a control message of len bytes; returns its
 * size (at most 5), or 0 when len is over TG_LINK_CTL_MAX (the peer would refuse it). */
size_t tg_link_ctl_header(uint8_t *out, size_t len);
/* Control framing: 0 when more bytes are needed, -1 when the length is malformed or over
 * TG_LINK_CTL_MAX, else the total size, with msg and mlen set to the message bytes. */
long tg_link_ctl_parse(const uint8_t *buf, size_t len, const uint8_t **msg, size_t *mlen);
/* The total size of the control message whose length prefix starts buf (0: the prefix is not
 * complete yet; -1: malformed or over TG_LINK_CTL_MAX), before the message itself arrived. */
long tg_link_ctl_size(const uint8_t *buf, size_t len);

/* Node names: [A-Za-z0-9._-]{1,63}, not "." or "..", not starting with '@' (reserved for
 * groups such as "@all"). */
int tg_link_node_name_ok(const char *name);
/* A LOST record's key (n bytes, not NUL-terminated): [A-Za-z0-9._-]{1,TG_LINK_LOST_MAX}, the
 * characters of node names (it goes into logs and into Detach/Attach requests as is). */
int tg_link_lost_key_ok(const char *key, size_t n);

/* Parses "/node/NAME/consumer", "/node/NAME/producer" or "/node/NAME/adb". Returns 0 with name
 * (>= 64 bytes) and *producer set to the channel kind (0 consumer, 1 producer, 2 adb), -1
 * otherwise. */
int tg_link_parse_path(const char *path, size_t len, char *name, size_t namelen, int *producer);

#endif
