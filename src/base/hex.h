/* hex.h: bytes as hexadecimal text and back, the one reading of hex ids and digests in tracegate
 * (link ids, resume keys, token digests, span ids in NDJSON): exactly two hex digits per byte,
 * nothing else accepted (no sign, space or "0x" that a scanf-style reading would let through).
 * Pure functions; thread-safe. */
#ifndef TRACEGATE_BASE_HEX_H
#define TRACEGATE_BASE_HEX_H

#include <stddef.h>
#include <stdint.h>

/* Writes the n bytes of in as 2n lower-case hex digits and a NUL to out (2n + 1 bytes). */
void tg_hex_encode(char *out, const uint8_t *in, size_t n);

/* Reads s, which must be exactly 2n hex digits (either case), into the n bytes of out.
 * 0, or -1 (out then undefined). */
int tg_hex_decode(uint8_t *out, size_t n, const char *s);

#endif
