/* textproto.h: protobuf text format reader/printer and config loader, driven by
 * protobuf-c runtime descriptors (works for every message type, no per-message code).
 *
 * Reader grammar (what Perfetto config files use):
 *   field: value            scalar field (the ':' is required for scalars)
 *   field { ... }           message field; also `field: { ... }`, `field < ... >`
 *   field: [v1, v2]         repeated field, list form (messages too: `f: [{..}, {..}]`)
 *   # comment               to end of line
 *   ',' or ';'              optional separators after any field
 * Values: "..." / '...' strings with C escapes (\n \t \r \a \b \f \v \\ \" \' \?
 * \xHH, octal \ooo, \uXXXX, \UXXXXXXXX) and adjacent-literal concatenation;
 * integers in decimal, hex (0x..) or octal (0..), optionally negative; floats
 * incl. exponents, an `f` suffix, inf/infinity/nan; bools true/false/t/f/True/False/1/0;
 * enums by value name or by number; bytes fields from strings.
 * The reader is strict where protobuf's TextFormat::Parse is: a singular field
 * given twice, two members of one oneof, a missing proto2 `required` field,
 * out-of-range integers and type mismatches are errors. Extension/Any syntax
 * (`[name]`) and numeric field names are not supported.
 *
 * Errors are written to err (when err != NULL && errlen > 0) as
 * "LINE:COL: message" with 1-based line and byte column, e.g.
 * "3:5: unknown field 'bufers' in perfetto.protos.TraceConfig".
 *
 * Floating point text uses '.' regardless of the process locale.
 * All functions are reentrant and may be called from any thread. */
#ifndef TRACEGATE_TEXTPROTO_H
#define TRACEGATE_TEXTPROTO_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Maximum nesting depth of messages accepted by the reader. */
#define TG_TEXTPROTO_MAX_DEPTH 100

/* Parses text (len bytes, need not be NUL-terminated) as a message of type desc
 * and encodes it to protobuf wire format. Fields are emitted in field-number
 * order exactly as protobuf_c_message_pack() would emit the same message;
 * repeated scalars are unpacked unless the field has PROTOBUF_C_FIELD_FLAG_PACKED.
 * On success returns 0 and sets *out (malloc'd, caller frees; non-NULL even for
 * an empty message) and *out_len. On error returns -1, fills err, *out = NULL. */
int tg_textproto_to_binary(const ProtobufCMessageDescriptor *desc, const char *text, size_t len,
                           uint8_t **out, size_t *out_len, char *err, size_t errlen);

/* Parses text as a message of type desc. Returns a message to be released with
 * protobuf_c_message_free_unpacked(msg, NULL), or NULL on error (err filled). */
ProtobufCMessage *tg_textproto_parse(const ProtobufCMessageDescriptor *desc, const char *text,
                                     size_t len, char *err, size_t errlen);

/* Prints every set field of msg (has_ flags, non-NULL pointers, the active oneof
 * member, all repeated elements) recursively in text format: enums by value name
 * (number when the value is unknown), strings/bytes double-quoted with C escapes
 * (\n \r \t \" \' \\, other bytes as 3-digit octal; valid UTF-8 in string
 * fields is kept verbatim), floats with the shortest representation that reads
 * back exactly. Apart from float formatting and non-ASCII strings the output is
 * byte-identical to protobuf's own text printer (2-space indent per level,
 * `name {` ... `}`, one line per repeated value). Unknown fields are printed
 * after the known ones as `NUMBER: raw` lines (varint as unsigned decimal,
 * fixed32/fixed64 as 0x-hex, length-delimited as an escaped string); those
 * lines are for humans and are not accepted by the reader.
 * indent >= 0: one field per line, top-level lines prefixed by indent spaces,
 * each nesting level adds 2 more. indent < 0: everything on a single line
 * (no trailing newline), for logs.
 * Returns a malloc'd NUL-terminated string (caller frees; "" for an empty
 * message), or NULL if msg is NULL or memory runs out. */
char *tg_textproto_print(const ProtobufCMessage *msg, int indent);

/* Loads a message of type desc from a buffer holding either the binary wire
 * encoding or text format. If the bytes look like text (valid UTF-8 with no
 * control characters other than \t \n \v \f \r; an optional UTF-8 BOM is
 * skipped) text parsing is tried first; if it fails and the bytes also decode
 * as a binary message without unknown top-level fields, the binary decode is
 * used, otherwise the text error is reported. Other input is decoded as binary.
 * Empty input yields an empty message. On success returns 0 and sets *out
 * (free with protobuf_c_message_free_unpacked(*out, NULL)); on error returns
 * -1, sets *out = NULL and fills err. */
int tg_config_load(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                   ProtobufCMessage **out, char *err, size_t errlen);

#endif
