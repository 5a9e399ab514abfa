/* test_textproto_types.c: every protobuf scalar type, packed/unpacked repeated
 * fields, oneofs, required fields, string defaults and proto3 implicit presence,
 * through the text format reader and printer, checked byte-for-byte against
 * protobuf_c_message_pack() of the same message built in C.
 *
 * The Perfetto schemas lack sint/sfixed/float/proto3 fields, so this file embeds
 * protoc-c 1.4.1 output (pack/unpack wrappers dropped, reformatted) for:
 *
 *   // tg_alltypes.proto
 *   syntax = "proto2"; package tgtest;
 *   enum Color { RED = 0; GREEN = 1; BLUE = -2; }
 *   message Inner { required int32 req = 1; optional string note = 2; }
 *   message AllTypes {
 *     optional int32 f_int32 = 1;       optional sint32 f_sint32 = 2;
 *     optional sfixed32 f_sfixed32 = 3; optional int64 f_int64 = 4;
 *     optional sint64 f_sint64 = 5;     optional sfixed64 f_sfixed64 = 6;
 *     optional uint32 f_uint32 = 7;     optional fixed32 f_fixed32 = 8;
 *     optional uint64 f_uint64 = 9;     optional fixed64 f_fixed64 = 10;
 *     optional float f_float = 11;      optional double f_double = 12;
 *     optional bool f_bool = 13;        optional string f_string = 14;
 *     optional bytes f_bytes = 15;      optional Color f_enum = 16;
 *     optional Inner f_msg = 17;
 *     repeated int32 r_int32 = 20;
 *     repeated sint32 r_sint32_packed = 21 [packed = true];
 *     repeated float r_float_packed = 22 [packed = true];
 *     repeated string r_string = 23;    repeated bytes r_bytes = 24;
 *     repeated Inner r_msg = 25;        repeated Color r_enum = 26;
 *     repeated fixed64 r_fixed64 = 27;
 *     optional string f_default = 28 [default = "dflt"];
 *     oneof choice { int32 o_int = 30; string o_str = 31; Inner o_msg = 32; }
 *   }
 *   // tg_p3.proto
 *   syntax = "proto3"; package tgtest;
 *   message P3 { int32 a = 1; string s = 2; bytes b = 3; repeated int32 r = 4; double d = 5; }
 */
#include <float.h>
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tracegate/textproto.h"

/* ---------------- embedded protoc-c output ---------------- */
typedef struct Tgtest__Inner Tgtest__Inner;
typedef struct Tgtest__AllTypes Tgtest__AllTypes;

/* --- enums --- */

typedef enum _Tgtest__Color {
  TGTEST__COLOR__RED = 0,
  TGTEST__COLOR__GREEN = 1,
  TGTEST__COLOR__BLUE = -2
    PROTOBUF_C__FORCE_ENUM_TO_BE_INT_SIZE(TGTEST__COLOR)
} Tgtest__Color;

/* --- messages --- */

struct  Tgtest__Inner
{
  ProtobufCMessage base;
  int32_t req;
  char *note;
};
#define TGTEST__INNER__INIT \
 { PROTOBUF_C_MESSAGE_INIT (&tgtest__inner__descriptor) \
    , 0, NULL }

typedef enum {
  TGTEST__ALL_TYPES__CHOICE__NOT_SET = 0,
  TGTEST__ALL_TYPES__CHOICE_O_INT = 30,
  TGTEST__ALL_TYPES__CHOICE_O_STR = 31,
  TGTEST__ALL_TYPES__CHOICE_O_MSG = 32
    PROTOBUF_C__FORCE_ENUM_TO_BE_INT_SIZE(TGTEST__ALL_TYPES__CHOICE__CASE)
} Tgtest__AllTypes__ChoiceCase;

struct  Tgtest__AllTypes
{
  ProtobufCMessage base;
  protobuf_c_boolean has_f_int32;
  int32_t f_int32;
  protobuf_c_boolean has_f_sint32;
  int32_t f_sint32;
  protobuf_c_boolean has_f_sfixed32;
  int32_t f_sfixed32;
  protobuf_c_boolean has_f_int64;
  int64_t f_int64;
  protobuf_c_boolean has_f_sint64;
  int64_t f_sint64;
  protobuf_c_boolean has_f_sfixed64;
  int64_t f_sfixed64;
  protobuf_c_boolean has_f_uint32;
  uint32_t f_uint32;
  protobuf_c_boolean has_f_fixed32;
  uint32_t f_fixed32;
  protobuf_c_boolean has_f_uint64;
  uint64_t f_uint64;
  protobuf_c_boolean has_f_fixed64;
  uint64_t f_fixed64;
  protobuf_c_boolean has_f_float;
  float f_float;
  protobuf_c_boolean has_f_double;
  double f_double;
  protobuf_c_boolean has_f_bool;
  protobuf_c_boolean f_bool;
  char *f_string;
  protobuf_c_boolean has_f_bytes;
  ProtobufCBinaryData f_bytes;
  protobuf_c_boolean has_f_enum;
  Tgtest__Color f_enum;
  Tgtest__Inner *f_msg;
  size_t n_r_int32;
  int32_t *r_int32;
  size_t n_r_sint32_packed;
  int32_t *r_sint32_packed;
  size_t n_r_float_packed;
  float *r_float_packed;
  size_t n_r_string;
  char **r_string;
  size_t n_r_bytes;
  ProtobufCBinaryData *r_bytes;
  size_t n_r_msg;
  Tgtest__Inner **r_msg;
  size_t n_r_enum;
  Tgtest__Color *r_enum;
  size_t n_r_fixed64;
  uint64_t *r_fixed64;
  char *f_default;
  Tgtest__AllTypes__ChoiceCase choice_case;
  union {
    int32_t o_int;
    char *o_str;
    Tgtest__Inner *o_msg;
  };
};
extern char tgtest__all_types__f_default__default_value[];
#define TGTEST__ALL_TYPES__INIT \
 { PROTOBUF_C_MESSAGE_INIT (&tgtest__all_types__descriptor) \
    , 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, {0,NULL}, 0, TGTEST__COLOR__RED, NULL, 0,NULL, 0,NULL, 0,NULL, 0,NULL, 0,NULL, 0,NULL, 0,NULL, 0,NULL, tgtest__all_types__f_default__default_value, TGTEST__ALL_TYPES__CHOICE__NOT_SET, {0} }

void tgtest__inner__init(Tgtest__Inner *message);
void tgtest__all_types__init(Tgtest__AllTypes *message);

/* --- descriptors --- */

extern const ProtobufCEnumDescriptor    tgtest__color__descriptor;
extern const ProtobufCMessageDescriptor tgtest__inner__descriptor;
extern const ProtobufCMessageDescriptor tgtest__all_types__descriptor;

typedef struct Tgtest__P3 Tgtest__P3;

/* --- enums --- */

/* --- messages --- */

struct  Tgtest__P3
{
  ProtobufCMessage base;
  int32_t a;
  char *s;
  ProtobufCBinaryData b;
  size_t n_r;
  int32_t *r;
  double d;
};
#define TGTEST__P3__INIT \
 { PROTOBUF_C_MESSAGE_INIT (&tgtest__p3__descriptor) \
    , 0, (char *)protobuf_c_empty_string, {0,NULL}, 0,NULL, 0 }

void tgtest__p3__init(Tgtest__P3 *message);

/* --- descriptors --- */

extern const ProtobufCMessageDescriptor tgtest__p3__descriptor;

void tgtest__inner__init(Tgtest__Inner *message)
{
  static const Tgtest__Inner init_value = TGTEST__INNER__INIT;
  *message = init_value;
}
void tgtest__all_types__init(Tgtest__AllTypes *message)
{
  static const Tgtest__AllTypes init_value = TGTEST__ALL_TYPES__INIT;
  *message = init_value;
}
static const ProtobufCFieldDescriptor tgtest__inner__field_descriptors[2] =
{
  { "req", 1, PROTOBUF_C_LABEL_REQUIRED, PROTOBUF_C_TYPE_INT32, 0, offsetof(Tgtest__Inner, req), NULL, NULL, 0, 0,NULL,NULL },
  { "note", 2, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING, 0, offsetof(Tgtest__Inner, note), NULL, NULL, 0, 0,NULL,NULL },
};
static const unsigned tgtest__inner__field_indices_by_name[] = {
  1,   /* field[1] = note */
  0,   /* field[0] = req */
};
static const ProtobufCIntRange tgtest__inner__number_ranges[1 + 1] =
{
  { 1, 0 },
  { 0, 2 }
};
const ProtobufCMessageDescriptor tgtest__inner__descriptor =
{
  PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
  "tgtest.Inner",
  "Inner",
  "Tgtest__Inner",
  "tgtest",
  sizeof(Tgtest__Inner),
  2,
  tgtest__inner__field_descriptors,
  tgtest__inner__field_indices_by_name,
  1,  tgtest__inner__number_ranges,
  (ProtobufCMessageInit) tgtest__inner__init,
  NULL,NULL,NULL
};
char tgtest__all_types__f_default__default_value[] = "dflt";
static const ProtobufCFieldDescriptor tgtest__all_types__field_descriptors[29] =
{
  { "f_int32", 1, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT32, offsetof(Tgtest__AllTypes, has_f_int32), offsetof(Tgtest__AllTypes, f_int32), NULL, NULL, 0, 0,NULL,NULL },
  { "f_sint32", 2, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_SINT32, offsetof(Tgtest__AllTypes, has_f_sint32), offsetof(Tgtest__AllTypes, f_sint32), NULL, NULL, 0, 0,NULL,NULL },
  { "f_sfixed32", 3, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_SFIXED32, offsetof(Tgtest__AllTypes, has_f_sfixed32), offsetof(Tgtest__AllTypes, f_sfixed32), NULL, NULL, 0, 0,NULL,NULL },
  { "f_int64", 4, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT64, offsetof(Tgtest__AllTypes, has_f_int64), offsetof(Tgtest__AllTypes, f_int64), NULL, NULL, 0, 0,NULL,NULL },
  { "f_sint64", 5, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_SINT64, offsetof(Tgtest__AllTypes, has_f_sint64), offsetof(Tgtest__AllTypes, f_sint64), NULL, NULL, 0, 0,NULL,NULL },
  { "f_sfixed64", 6, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_SFIXED64, offsetof(Tgtest__AllTypes, has_f_sfixed64), offsetof(Tgtest__AllTypes, f_sfixed64), NULL, NULL, 0, 0,NULL,NULL },
  { "f_uint32", 7, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_UINT32, offsetof(Tgtest__AllTypes, has_f_uint32), offsetof(Tgtest__AllTypes, f_uint32), NULL, NULL, 0, 0,NULL,NULL },
  { "f_fixed32", 8, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_FIXED32, offsetof(Tgtest__AllTypes, has_f_fixed32), offsetof(Tgtest__AllTypes, f_fixed32), NULL, NULL, 0, 0,NULL,NULL },
  { "f_uint64", 9, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_UINT64, offsetof(Tgtest__AllTypes, has_f_uint64), offsetof(Tgtest__AllTypes, f_uint64), NULL, NULL, 0, 0,NULL,NULL },
  { "f_fixed64", 10, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_FIXED64, offsetof(Tgtest__AllTypes, has_f_fixed64), offsetof(Tgtest__AllTypes, f_fixed64), NULL, NULL, 0, 0,NULL,NULL },
  { "f_float", 11, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_FLOAT, offsetof(Tgtest__AllTypes, has_f_float), offsetof(Tgtest__AllTypes, f_float), NULL, NULL, 0, 0,NULL,NULL },
  { "f_double", 12, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_DOUBLE, offsetof(Tgtest__AllTypes, has_f_double), offsetof(Tgtest__AllTypes, f_double), NULL, NULL, 0, 0,NULL,NULL },
  { "f_bool", 13, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_BOOL, offsetof(Tgtest__AllTypes, has_f_bool), offsetof(Tgtest__AllTypes, f_bool), NULL, NULL, 0, 0,NULL,NULL },
  { "f_string", 14, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING, 0, offsetof(Tgtest__AllTypes, f_string), NULL, NULL, 0, 0,NULL,NULL },
  { "f_bytes", 15, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_BYTES, offsetof(Tgtest__AllTypes, has_f_bytes), offsetof(Tgtest__AllTypes, f_bytes), NULL, NULL, 0, 0,NULL,NULL },
  { "f_enum", 16, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_ENUM, offsetof(Tgtest__AllTypes, has_f_enum), offsetof(Tgtest__AllTypes, f_enum), &tgtest__color__descriptor, NULL, 0, 0,NULL,NULL },
  { "f_msg", 17, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_MESSAGE, 0, offsetof(Tgtest__AllTypes, f_msg), &tgtest__inner__descriptor, NULL, 0, 0,NULL,NULL },
  { "r_int32", 20, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_INT32, offsetof(Tgtest__AllTypes, n_r_int32), offsetof(Tgtest__AllTypes, r_int32), NULL, NULL, 0, 0,NULL,NULL },
  { "r_sint32_packed", 21, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_SINT32, offsetof(Tgtest__AllTypes, n_r_sint32_packed), offsetof(Tgtest__AllTypes, r_sint32_packed), NULL, NULL, 0 | PROTOBUF_C_FIELD_FLAG_PACKED, 0,NULL,NULL },
  { "r_float_packed", 22, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_FLOAT, offsetof(Tgtest__AllTypes, n_r_float_packed), offsetof(Tgtest__AllTypes, r_float_packed), NULL, NULL, 0 | PROTOBUF_C_FIELD_FLAG_PACKED, 0,NULL,NULL },
  { "r_string", 23, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_STRING, offsetof(Tgtest__AllTypes, n_r_string), offsetof(Tgtest__AllTypes, r_string), NULL, NULL, 0, 0,NULL,NULL },
  { "r_bytes", 24, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_BYTES, offsetof(Tgtest__AllTypes, n_r_bytes), offsetof(Tgtest__AllTypes, r_bytes), NULL, NULL, 0, 0,NULL,NULL },
  { "r_msg", 25, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_MESSAGE, offsetof(Tgtest__AllTypes, n_r_msg), offsetof(Tgtest__AllTypes, r_msg), &tgtest__inner__descriptor, NULL, 0, 0,NULL,NULL },
  { "r_enum", 26, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_ENUM, offsetof(Tgtest__AllTypes, n_r_enum), offsetof(Tgtest__AllTypes, r_enum), &tgtest__color__descriptor, NULL, 0, 0,NULL,NULL },
  { "r_fixed64", 27, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_FIXED64, offsetof(Tgtest__AllTypes, n_r_fixed64), offsetof(Tgtest__AllTypes, r_fixed64), NULL, NULL, 0, 0,NULL,NULL },
  { "f_default", 28, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING, 0, offsetof(Tgtest__AllTypes, f_default), NULL, &tgtest__all_types__f_default__default_value, 0, 0,NULL,NULL },
  { "o_int", 30, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT32, offsetof(Tgtest__AllTypes, choice_case), offsetof(Tgtest__AllTypes, o_int), NULL, NULL, 0 | PROTOBUF_C_FIELD_FLAG_ONEOF, 0,NULL,NULL },
  { "o_str", 31, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING, offsetof(Tgtest__AllTypes, choice_case), offsetof(Tgtest__AllTypes, o_str), NULL, NULL, 0 | PROTOBUF_C_FIELD_FLAG_ONEOF, 0,NULL,NULL },
  { "o_msg", 32, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_MESSAGE, offsetof(Tgtest__AllTypes, choice_case), offsetof(Tgtest__AllTypes, o_msg), &tgtest__inner__descriptor, NULL, 0 | PROTOBUF_C_FIELD_FLAG_ONEOF, 0,NULL,NULL },
};
static const unsigned tgtest__all_types__field_indices_by_name[] = {
  12,   /* field[12] = f_bool */
  14,   /* field[14] = f_bytes */
  25,   /* field[25] = f_default */
  11,   /* field[11] = f_double */
  15,   /* field[15] = f_enum */
  7,   /* field[7] = f_fixed32 */
  9,   /* field[9] = f_fixed64 */
  10,   /* field[10] = f_float */
  0,   /* field[0] = f_int32 */
  3,   /* field[3] = f_int64 */
  16,   /* field[16] = f_msg */
  2,   /* field[2] = f_sfixed32 */
  5,   /* field[5] = f_sfixed64 */
  1,   /* field[1] = f_sint32 */
  4,   /* field[4] = f_sint64 */
  13,   /* field[13] = f_string */
  6,   /* field[6] = f_uint32 */
  8,   /* field[8] = f_uint64 */
  26,   /* field[26] = o_int */
  28,   /* field[28] = o_msg */
  27,   /* field[27] = o_str */
  21,   /* field[21] = r_bytes */
  23,   /* field[23] = r_enum */
  24,   /* field[24] = r_fixed64 */
  19,   /* field[19] = r_float_packed */
  17,   /* field[17] = r_int32 */
  22,   /* field[22] = r_msg */
  18,   /* field[18] = r_sint32_packed */
  20,   /* field[20] = r_string */
};
static const ProtobufCIntRange tgtest__all_types__number_ranges[3 + 1] =
{
  { 1, 0 },
  { 20, 17 },
  { 30, 26 },
  { 0, 29 }
};
const ProtobufCMessageDescriptor tgtest__all_types__descriptor =
{
  PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
  "tgtest.AllTypes",
  "AllTypes",
  "Tgtest__AllTypes",
  "tgtest",
  sizeof(Tgtest__AllTypes),
  29,
  tgtest__all_types__field_descriptors,
  tgtest__all_types__field_indices_by_name,
  3,  tgtest__all_types__number_ranges,
  (ProtobufCMessageInit) tgtest__all_types__init,
  NULL,NULL,NULL
};
static const ProtobufCEnumValue tgtest__color__enum_values_by_number[3] =
{
  { "BLUE", "TGTEST__COLOR__BLUE", -2 },
  { "RED", "TGTEST__COLOR__RED", 0 },
  { "GREEN", "TGTEST__COLOR__GREEN", 1 },
};
static const ProtobufCIntRange tgtest__color__value_ranges[] = {
{-2, 0},{0, 1},{0, 3}
};
static const ProtobufCEnumValueIndex tgtest__color__enum_values_by_name[3] =
{
  { "BLUE", 0 },
  { "GREEN", 2 },
  { "RED", 1 },
};
const ProtobufCEnumDescriptor tgtest__color__descriptor =
{
  PROTOBUF_C__ENUM_DESCRIPTOR_MAGIC,
  "tgtest.Color",
  "Color",
  "Tgtest__Color",
  "tgtest",
  3,
  tgtest__color__enum_values_by_number,
  3,
  tgtest__color__enum_values_by_name,
  2,
  tgtest__color__value_ranges,
  NULL,NULL,NULL,NULL
};

void tgtest__p3__init(Tgtest__P3 *message)
{
  static const Tgtest__P3 init_value = TGTEST__P3__INIT;
  *message = init_value;
}
static const ProtobufCFieldDescriptor tgtest__p3__field_descriptors[5] =
{
  { "a", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_INT32, 0, offsetof(Tgtest__P3, a), NULL, NULL, 0, 0,NULL,NULL },
  { "s", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, offsetof(Tgtest__P3, s), NULL, &protobuf_c_empty_string, 0, 0,NULL,NULL },
  { "b", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_BYTES, 0, offsetof(Tgtest__P3, b), NULL, NULL, 0, 0,NULL,NULL },
  { "r", 4, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_INT32, offsetof(Tgtest__P3, n_r), offsetof(Tgtest__P3, r), NULL, NULL, 0 | PROTOBUF_C_FIELD_FLAG_PACKED, 0,NULL,NULL },
  { "d", 5, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_DOUBLE, 0, offsetof(Tgtest__P3, d), NULL, NULL, 0, 0,NULL,NULL },
};
static const unsigned tgtest__p3__field_indices_by_name[] = {
  0,   /* field[0] = a */
  2,   /* field[2] = b */
  4,   /* field[4] = d */
  3,   /* field[3] = r */
  1,   /* field[1] = s */
};
static const ProtobufCIntRange tgtest__p3__number_ranges[1 + 1] =
{
  { 1, 0 },
  { 0, 5 }
};
const ProtobufCMessageDescriptor tgtest__p3__descriptor =
{
  PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
  "tgtest.P3",
  "P3",
  "Tgtest__P3",
  "tgtest",
  sizeof(Tgtest__P3),
  5,
  tgtest__p3__field_descriptors,
  tgtest__p3__field_indices_by_name,
  1,  tgtest__p3__number_ranges,
  (ProtobufCMessageInit) tgtest__p3__init,
  NULL,NULL,NULL
};

/* ---------------- end of embedded protoc-c output ---------------- */

#define AT_DESC (&tgtest__all_types__descriptor)

static const char k_all[] =
    "f_int32: -5 f_sint32: -1 f_sfixed32: -2 f_int64: -9223372036854775808\n"
    "f_sint64: 9223372036854775807 f_sfixed64: -3 f_uint32: 4294967295 f_fixed32: 0xdeadbeef\n"
    "f_uint64: 18446744073709551615 f_fixed64: 0x0123456789abcdef f_float: 1.25 f_double: -2.5e-300\n"
    "f_bool: true f_string: \"h\\303\\251llo\" f_bytes: \"\\000\\001\\377\" f_enum: BLUE\n"
    "f_msg { req: 7 note: \"n\" }\n"
    "r_int32: [1, -1] r_int32: 0\n"
    "r_sint32_packed: [-1, 1, -64]\n"
    "r_float_packed: [0.5, -inf]\n"
    "r_string: [\"\", \"x\"]\n"
    "r_bytes: \"\\xff\" r_bytes: ''\n"
    "r_msg { req: 1 } r_msg < req: 2 >\n"
    "r_enum: [RED, 1, BLUE]\n"
    "r_fixed64: [1, 18446744073709551615]\n"
    "f_default: \"dflt\"\n"
    "o_str: \"chosen\"\n";

static const char k_all_printed[] =
    "f_int32: -5\n"
    "f_sint32: -1\n"
    "f_sfixed32: -2\n"
    "f_int64: -9223372036854775808\n"
    "f_sint64: 9223372036854775807\n"
    "f_sfixed64: -3\n"
    "f_uint32: 4294967295\n"
    "f_fixed32: 3735928559\n"
    "f_uint64: 18446744073709551615\n"
    "f_fixed64: 81985529216486895\n"
    "f_float: 1.25\n"
    "f_double: -2.5e-300\n"
    "f_bool: true\n"
    "f_string: \"h\xc3\xa9llo\"\n"
    "f_bytes: \"\\000\\001\\377\"\n"
    "f_enum: BLUE\n"
    "f_msg {\n"
    "  req: 7\n"
    "  note: \"n\"\n"
    "}\n"
    "r_int32: 1\n"
    "r_int32: -1\n"
    "r_int32: 0\n"
    "r_sint32_packed: -1\n"
    "r_sint32_packed: 1\n"
    "r_sint32_packed: -64\n"
    "r_float_packed: 0.5\n"
    "r_float_packed: -inf\n"
    "r_string: \"\"\n"
    "r_string: \"x\"\n"
    "r_bytes: \"\\377\"\n"
    "r_bytes: \"\"\n"
    "r_msg {\n"
    "  req: 1\n"
    "}\n"
    "r_msg {\n"
    "  req: 2\n"
    "}\n"
    "r_enum: RED\n"
    "r_enum: GREEN\n"
    "r_enum: BLUE\n"
    "r_fixed64: 1\n"
    "r_fixed64: 18446744073709551615\n"
    "f_default: \"dflt\"\n"
    "o_str: \"chosen\"\n";

static uint8_t *to_bin(const ProtobufCMessageDescriptor *desc, const char *text, size_t *n)
{
    char err[256] = "";
    uint8_t *bin = NULL;
    if (tg_textproto_to_binary(desc, text, strlen(text), &bin, n, err, sizeof err) != 0)
        fail_msg("to_binary failed: %s\n--- input ---\n%s", err, text);
    return bin;
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *n)
{
    *n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(protobuf_c_message_pack(m, b), *n);
    return b;
}

static void expect_error(const ProtobufCMessageDescriptor *desc, const char *text, const char *want)
{
    char err[256] = "";
    ProtobufCMessage *m = tg_textproto_parse(desc, text, strlen(text), err, sizeof err);
    if (m) {
        protobuf_c_message_free_unpacked(m, NULL);
        fail_msg("parse of '%s' unexpectedly succeeded", text);
    }
    if (strcmp(err, want) != 0)
        fail_msg("input '%s':\n  got  '%s'\n  want '%s'", text, err, want);
}

static void expect_bytes(const ProtobufCMessageDescriptor *desc, const char *text, const uint8_t *want, size_t n)
{
    size_t got_n;
    uint8_t *got = to_bin(desc, text, &got_n);
    if (got_n != n || memcmp(got, want, n) != 0) {
        fprintf(stderr, "got:");
        for (size_t i = 0; i < got_n; i++)
            fprintf(stderr, " %02x", got[i]);
        fprintf(stderr, "\n");
        free(got);
        fail_msg("unexpected encoding for '%s'", text);
    }
    free(got);
}

/* Parses text, prints it, parses the print: both encodings must be equal. */
static void assert_round_trip(const ProtobufCMessageDescriptor *desc, const char *text)
{
    size_t n1, n2;
    uint8_t *b1 = to_bin(desc, text, &n1);
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, n1, b1);
    assert_non_null(m);
    for (int indent = -1; indent <= 3; indent += 4) {
        char *s = tg_textproto_print(m, indent);
        assert_non_null(s);
        uint8_t *b2 = to_bin(desc, s, &n2);
        if (n1 != n2 || memcmp(b1, b2, n1) != 0)
            fail_msg("round trip differs for:\n%s\nprinted as:\n%s", text, s);
        free(b2);
        free(s);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    free(b1);
}

static void test_all_types_values(void **state)
{
    (void)state;
    char err[256];
    Tgtest__AllTypes *m = (Tgtest__AllTypes *)tg_textproto_parse(AT_DESC, k_all, strlen(k_all), err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    assert_true(m->has_f_int32 && m->f_int32 == -5);
    assert_true(m->has_f_sint32 && m->f_sint32 == -1);
    assert_true(m->has_f_sfixed32 && m->f_sfixed32 == -2);
    assert_true(m->has_f_int64 && m->f_int64 == INT64_MIN);
    assert_true(m->has_f_sint64 && m->f_sint64 == INT64_MAX);
    assert_true(m->has_f_sfixed64 && m->f_sfixed64 == -3);
    assert_true(m->has_f_uint32 && m->f_uint32 == UINT32_MAX);
    assert_true(m->has_f_fixed32 && m->f_fixed32 == 0xdeadbeefu);
    assert_true(m->has_f_uint64 && m->f_uint64 == UINT64_MAX);
    assert_true(m->has_f_fixed64 && m->f_fixed64 == 0x0123456789abcdefull);
    assert_true(m->has_f_float && m->f_float == 1.25f);
    assert_true(m->has_f_double && m->f_double == -2.5e-300);
    assert_true(m->has_f_bool && m->f_bool);
    assert_string_equal(m->f_string, "h\xc3\xa9llo");
    assert_true(m->has_f_bytes);
    assert_int_equal(m->f_bytes.len, 3);
    assert_memory_equal(m->f_bytes.data, "\0\1\377", 3);
    assert_true(m->has_f_enum && m->f_enum == TGTEST__COLOR__BLUE);
    assert_int_equal(m->f_msg->req, 7);
    assert_string_equal(m->f_msg->note, "n");
    assert_int_equal(m->n_r_int32, 3);
    assert_int_equal(m->r_int32[1], -1);
    assert_int_equal(m->n_r_sint32_packed, 3);
    assert_int_equal(m->r_sint32_packed[2], -64);
    assert_int_equal(m->n_r_float_packed, 2);
    assert_true(m->r_float_packed[0] == 0.5f && isinf(m->r_float_packed[1]) && m->r_float_packed[1] < 0);
    assert_int_equal(m->n_r_string, 2);
    assert_string_equal(m->r_string[0], "");
    assert_int_equal(m->n_r_bytes, 2);
    assert_int_equal(m->r_bytes[0].len, 1);
    assert_int_equal(m->r_bytes[1].len, 0);
    assert_int_equal(m->n_r_msg, 2);
    assert_int_equal(m->r_msg[1]->req, 2);
    assert_int_equal(m->n_r_enum, 3);
    assert_int_equal(m->r_enum[1], TGTEST__COLOR__GREEN);
    assert_int_equal(m->r_enum[2], TGTEST__COLOR__BLUE);
    assert_true(m->r_fixed64[1] == UINT64_MAX);
    assert_string_equal(m->f_default, "dflt");
    assert_int_equal(m->choice_case, TGTEST__ALL_TYPES__CHOICE_O_STR);
    assert_string_equal(m->o_str, "chosen");
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

/* The text encoding equals protobuf-c's pack() of the same message built in C. */
static void test_all_types_match_pack(void **state)
{
    (void)state;
    Tgtest__Inner in7 = TGTEST__INNER__INIT, in1 = TGTEST__INNER__INIT, in2 = TGTEST__INNER__INIT;
    in7.req = 7;
    in7.note = (char *)"n";
    in1.req = 1;
    in2.req = 2;
    Tgtest__Inner *rmsg[] = {&in1, &in2};
    int32_t ri[] = {1, -1, 0};
    int32_t rs[] = {-1, 1, -64};
    float rf[] = {0.5f, -INFINITY};
    char *rstr[] = {(char *)"", (char *)"x"};
    ProtobufCBinaryData rb[] = {{1, (uint8_t *)"\377"}, {0, NULL}};
    Tgtest__Color re[] = {TGTEST__COLOR__RED, TGTEST__COLOR__GREEN, TGTEST__COLOR__BLUE};
    uint64_t rx[] = {1, UINT64_MAX};

    Tgtest__AllTypes m = TGTEST__ALL_TYPES__INIT;
    m.has_f_int32 = 1, m.f_int32 = -5;
    m.has_f_sint32 = 1, m.f_sint32 = -1;
    m.has_f_sfixed32 = 1, m.f_sfixed32 = -2;
    m.has_f_int64 = 1, m.f_int64 = INT64_MIN;
    m.has_f_sint64 = 1, m.f_sint64 = INT64_MAX;
    m.has_f_sfixed64 = 1, m.f_sfixed64 = -3;
    m.has_f_uint32 = 1, m.f_uint32 = UINT32_MAX;
    m.has_f_fixed32 = 1, m.f_fixed32 = 0xdeadbeefu;
    m.has_f_uint64 = 1, m.f_uint64 = UINT64_MAX;
    m.has_f_fixed64 = 1, m.f_fixed64 = 0x0123456789abcdefull;
    m.has_f_float = 1, m.f_float = 1.25f;
    m.has_f_double = 1, m.f_double = -2.5e-300;
    m.has_f_bool = 1, m.f_bool = 1;
    m.f_string = (char *)"h\xc3\xa9llo";
    m.has_f_bytes = 1, m.f_bytes.len = 3, m.f_bytes.data = (uint8_t *)"\0\1\377";
    m.has_f_enum = 1, m.f_enum = TGTEST__COLOR__BLUE;
    m.f_msg = &in7;
    m.n_r_int32 = 3, m.r_int32 = ri;
    m.n_r_sint32_packed = 3, m.r_sint32_packed = rs;
    m.n_r_float_packed = 2, m.r_float_packed = rf;
    m.n_r_string = 2, m.r_string = rstr;
    m.n_r_bytes = 2, m.r_bytes = rb;
    m.n_r_msg = 2, m.r_msg = rmsg;
    m.n_r_enum = 3, m.r_enum = re;
    m.n_r_fixed64 = 2, m.r_fixed64 = rx;
    m.f_default = (char *)"dflt"; /* a different pointer than the default: present */
    m.choice_case = TGTEST__ALL_TYPES__CHOICE_O_STR, m.o_str = (char *)"chosen";

    size_t want_n, got_n;
    uint8_t *want = pack(&m.base, &want_n);
    uint8_t *got = to_bin(AT_DESC, k_all, &got_n);
    assert_int_equal(got_n, want_n);
    assert_memory_equal(got, want, want_n);
    free(got);
    free(want);
}

static void test_scalar_encodings(void **state)
{
    (void)state;
    /* zigzag */
    expect_bytes(AT_DESC, "f_sint32: -1", (const uint8_t[]){0x10, 0x01}, 2);
    expect_bytes(AT_DESC, "f_sint32: -2147483648", (const uint8_t[]){0x10, 0xff, 0xff, 0xff, 0xff, 0x0f}, 6);
    expect_bytes(AT_DESC, "f_sint64: -9223372036854775808",
                 (const uint8_t[]){0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 11);
    /* fixed widths */
    expect_bytes(AT_DESC, "f_sfixed32: -2", (const uint8_t[]){0x1d, 0xfe, 0xff, 0xff, 0xff}, 5);
    expect_bytes(AT_DESC, "f_fixed32: 1", (const uint8_t[]){0x45, 1, 0, 0, 0}, 5);
    expect_bytes(AT_DESC, "f_sfixed64: -1", (const uint8_t[]){0x31, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 9);
    expect_bytes(AT_DESC, "f_float: 1", (const uint8_t[]){0x5d, 0, 0, 0x80, 0x3f}, 5);
    expect_bytes(AT_DESC, "f_float: -2.5f", (const uint8_t[]){0x5d, 0, 0, 0x20, 0xc0}, 5);
    expect_bytes(AT_DESC, "f_double: 0x10", (const uint8_t[]){0x61, 0, 0, 0, 0, 0, 0, 0x30, 0x40}, 9);
    /* negative enum values are sign-extended like int32 */
    expect_bytes(AT_DESC, "f_enum: BLUE",
                 (const uint8_t[]){0x80, 0x01, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 12);
    /* bools */
    expect_bytes(AT_DESC, "f_bool: True", (const uint8_t[]){0x68, 0x01}, 2);
    expect_bytes(AT_DESC, "f_bool: f", (const uint8_t[]){0x68, 0x00}, 2);
    expect_bytes(AT_DESC, "f_bool: 1", (const uint8_t[]){0x68, 0x01}, 2);
    /* packed: one length-delimited record per field */
    expect_bytes(AT_DESC, "r_sint32_packed: [1, -1] r_sint32_packed: 2",
                 (const uint8_t[]){0xaa, 0x01, 0x03, 0x02, 0x01, 0x04}, 6);
    expect_bytes(AT_DESC, "r_float_packed: []", (const uint8_t *)"", 0);
    /* unpacked repeated scalars: one record per value */
    expect_bytes(AT_DESC, "r_int32: [1, 2]", (const uint8_t[]){0xa0, 0x01, 0x01, 0xa0, 0x01, 0x02}, 6);
    /* bytes keep NULs */
    expect_bytes(AT_DESC, "f_bytes: \"a\\0b\"", (const uint8_t[]){0x7a, 0x03, 'a', 0, 'b'}, 5);
}

static void test_floats(void **state)
{
    (void)state;
    char err[256];
    static const struct {
        const char *text;
        double want;
    } cases[] = {
        {"f_double: 0.1", 0.1},           {"f_double: 1e10", 1e10},        {"f_double: -1E-5", -1e-5},
        {"f_double: .25", 0.25},          {"f_double: 3.", 3.0},           {"f_double: 5f", 5.0},
        {"f_double: 1e400", INFINITY},    {"f_double: -Infinity", -INFINITY}, {"f_double: 12345678901234567890123", 12345678901234567890123.0},
        {"f_double: 0777", 511.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Tgtest__AllTypes *m = (Tgtest__AllTypes *)tg_textproto_parse(AT_DESC, cases[i].text,
                                                                     strlen(cases[i].text), err, sizeof err);
        if (!m)
            fail_msg("%s: %s", cases[i].text, err);
        if (!(m->f_double == cases[i].want))
            fail_msg("%s: got %.17g", cases[i].text, m->f_double);
        protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    Tgtest__AllTypes *m = (Tgtest__AllTypes *)tg_textproto_parse(
        AT_DESC, "f_double: -nan f_float: 3.40282347e+38", 38, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    assert_true(isnan(m->f_double) && signbit(m->f_double));
    assert_true(m->f_float == FLT_MAX);
    char *s = tg_textproto_print(&m->base, 0);
    assert_string_equal(s, "f_float: 3.4028235e+38\nf_double: -nan\n");
    free(s);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    /* float fields are rounded once, from the decimal text */
    m = (Tgtest__AllTypes *)tg_textproto_parse(AT_DESC, "f_float: 0.1", 12, err, sizeof err);
    assert_non_null(m);
    assert_true(m->f_float == 0.1f);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void test_oneof_required_defaults(void **state)
{
    (void)state;
    expect_error(AT_DESC, "o_int: 1 o_msg { req: 1 }",
                 "1:10: field 'o_msg' conflicts with 'o_int': both are members of the same oneof");
    expect_error(AT_DESC, "o_str: \"a\"\no_str: \"b\"", "2:1: non-repeated field 'o_str' is specified more than once");
    expect_error(AT_DESC, "f_msg {\n  note: \"x\"\n}", "3:1: missing required field 'req' in tgtest.Inner");
    expect_error(AT_DESC, "r_msg [{ req: 1 }, {}]", "1:21: missing required field 'req' in tgtest.Inner");
    expect_error(&tgtest__inner__descriptor, "note: \"x\"", "1:10: missing required field 'req' in tgtest.Inner");
    expect_error(AT_DESC, "f_sint32: 2147483648", "1:11: value 2147483648 out of range for sint32 field 'f_sint32'");
    expect_error(AT_DESC, "f_fixed32: -1", "1:12: value -1 out of range for fixed32 field 'f_fixed32'");
    expect_error(AT_DESC, "f_bool: -1", "1:9: invalid value '-1' for bool field 'f_bool'");
    expect_error(AT_DESC, "f_bool: TRUE", "1:9: invalid value 'TRUE' for bool field 'f_bool'");
    expect_error(AT_DESC, "f_enum: PURPLE", "1:9: unknown value 'PURPLE' for enum tgtest.Color (field 'f_enum')");
    expect_error(AT_DESC, "f_bytes: 5", "1:10: expected a quoted string for bytes field 'f_bytes', got '5'");
    expect_error(AT_DESC, "f_float: true", "1:10: expected a number for float field 'f_float', got 'true'");
    expect_error(AT_DESC, "f_msg: [{ req: 1 }]", "1:8: list value for non-repeated field 'f_msg'");
    expect_error(AT_DESC, "f_enum: \"BLUE\"", "1:9: expected a value name or number for enum field 'f_enum', got a string");
    expect_error(AT_DESC, "f_enum: 1.0", "1:9: expected a value name or number for enum field 'f_enum', got '1.0'");

    /* oneof message member, and an enum number without a name */
    char err[256];
    Tgtest__AllTypes *m = (Tgtest__AllTypes *)tg_textproto_parse(AT_DESC, "o_msg { req: -3 } f_enum: 5", 27, err,
                                                                  sizeof err);
    if (!m)
        fail_msg("%s", err);
    assert_int_equal(m->choice_case, TGTEST__ALL_TYPES__CHOICE_O_MSG);
    assert_int_equal(m->o_msg->req, -3);
    assert_int_equal(m->f_enum, 5);
    char *s = tg_textproto_print(&m->base, 0);
    assert_string_equal(s, "f_enum: 5\no_msg {\n  req: -3\n}\n");
    free(s);
    protobuf_c_message_free_unpacked(&m->base, NULL);

    /* a string still pointing at its default is absent, like pack() sees it */
    Tgtest__AllTypes d = TGTEST__ALL_TYPES__INIT;
    s = tg_textproto_print(&d.base, 0);
    assert_string_equal(s, "");
    free(s);
    d.choice_case = TGTEST__ALL_TYPES__CHOICE_O_INT; /* o_int = 0, but set */
    s = tg_textproto_print(&d.base, 0);
    assert_string_equal(s, "o_int: 0\n");
    free(s);
}

static void test_proto3_implicit_presence(void **state)
{
    (void)state;
    /* zero values of proto3 fields are not serialized, exactly as pack() does */
    expect_bytes(&tgtest__p3__descriptor, "a: 0 s: \"\" b: '' d: -0.0 r: []", (const uint8_t *)"", 0);
    expect_bytes(&tgtest__p3__descriptor, "d: 0 a: 3 r: [1, 2] s: \"x\"",
                 (const uint8_t[]){0x08, 0x03, 0x12, 0x01, 'x', 0x22, 0x02, 0x01, 0x02}, 9);

    Tgtest__P3 p = TGTEST__P3__INIT;
    int32_t r[] = {1, 2};
    p.a = 3;
    p.s = (char *)"x";
    p.n_r = 2;
    p.r = r;
    size_t want_n, got_n;
    uint8_t *want = pack(&p.base, &want_n);
    uint8_t *got = to_bin(&tgtest__p3__descriptor, "a: 3 s: \"x\" r: 1 r: 2 b: \"\"", &got_n);
    assert_int_equal(got_n, want_n);
    assert_memory_equal(got, want, want_n);
    free(got);
    free(want);

    /* the printer skips zero proto3 fields */
    p.a = 0;
    char *s = tg_textproto_print(&p.base, 0);
    assert_string_equal(s, "s: \"x\"\nr: 1\nr: 2\n");
    free(s);
    assert_round_trip(&tgtest__p3__descriptor, "a: -7 b: \"\\001\" d: 2.5 r: [0, 0]");
}

static void test_print_formats(void **state)
{
    (void)state;
    char err[256];
    ProtobufCMessage *m = tg_textproto_parse(AT_DESC, k_all, strlen(k_all), err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    char *s = tg_textproto_print(m, 0);
    assert_non_null(s);
    assert_string_equal(s, k_all_printed);
    free(s);
    protobuf_c_message_free_unpacked(m, NULL);

    m = tg_textproto_parse(AT_DESC, "f_msg { req: 1 } f_int32: 2", 27, err, sizeof err);
    assert_non_null(m);
    s = tg_textproto_print(m, 4);
    assert_string_equal(s, "    f_int32: 2\n    f_msg {\n      req: 1\n    }\n");
    free(s);
    s = tg_textproto_print(m, -1);
    assert_string_equal(s, "f_int32: 2 f_msg { req: 1 }");
    free(s);
    protobuf_c_message_free_unpacked(m, NULL);
    assert_null(tg_textproto_print(NULL, 0));
}

static void test_print_escaping(void **state)
{
    (void)state;
    /* protobuf-c does not validate UTF-8: invalid sequences are escaped */
    Tgtest__AllTypes m = TGTEST__ALL_TYPES__INIT;
    m.f_string = (char *)"q\"b\\s\n\t\r\x01\x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xc3 \xed\xa0\x80 \xc0\xaf'7";
    m.has_f_bytes = 1;
    m.f_bytes.len = 5;
    m.f_bytes.data = (uint8_t *)"\xc3\xa9\0" "7";
    char *s = tg_textproto_print(&m.base, 0);
    assert_string_equal(s, "f_string: \"q\\\"b\\\\s\\n\\t\\r\\001\\177\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \\303 \\355\\240\\200 "
                           "\\300\\257\\'7\"\n"
                           "f_bytes: \"\\303\\251\\0007\\000\"\n");
    /* and it reads back to the same bytes */
    Tgtest__AllTypes *back = (Tgtest__AllTypes *)tg_textproto_parse(AT_DESC, s, strlen(s), NULL, 0);
    assert_non_null(back);
    assert_string_equal(back->f_string, m.f_string);
    assert_int_equal(back->f_bytes.len, 5);
    assert_memory_equal(back->f_bytes.data, m.f_bytes.data, 5);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(s);
}

static void test_unknown_fields_printed(void **state)
{
    (void)state;
    static const uint8_t wire[] = {
        0x08, 0x05,                                     /* f_int32: 5 */
        0xa0, 0x06, 0xac, 0x02,                         /* 100: varint 300 */
        0xa9, 0x06, 1, 0, 0, 0, 0, 0, 0, 0x80,          /* 101: fixed64 */
        0xb5, 0x06, 0xef, 0xbe, 0xad, 0xde,             /* 102: fixed32 */
        0xba, 0x06, 0x03, 'a', '\n', 0xff,              /* 103: bytes */
    };
    ProtobufCMessage *m = protobuf_c_message_unpack(AT_DESC, NULL, sizeof wire, wire);
    assert_non_null(m);
    assert_int_equal(m->n_unknown_fields, 4);
    char *s = tg_textproto_print(m, 2);
    assert_string_equal(s, "  f_int32: 5\n"
                           "  100: 300\n"
                           "  101: 0x8000000000000001\n"
                           "  102: 0xdeadbeef\n"
                           "  103: \"a\\n\\377\"\n");
    free(s);
    protobuf_c_message_free_unpacked(m, NULL);
}

/* Floats read and print with '.' even if the program switched LC_NUMERIC to a
 * locale with a decimal comma (skipped when no such locale is installed). */
static void test_locale_independent(void **state)
{
    (void)state;
    static const char *const locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "nl_NL.UTF-8"};
    const char *old = setlocale(LC_NUMERIC, NULL);
    char *saved = old ? strdup(old) : NULL;
    int switched = 0;
    for (size_t i = 0; i < sizeof locales / sizeof locales[0] && !switched; i++)
        switched = setlocale(LC_NUMERIC, locales[i]) != NULL;
    if (!switched) {
        free(saved);
        skip();
    }
    char err[256];
    Tgtest__AllTypes *m = (Tgtest__AllTypes *)tg_textproto_parse(AT_DESC, "f_double: 2.5 f_float: 0.25", 27, err,
                                                                  sizeof err);
    char *s = m ? tg_textproto_print(&m->base, -1) : NULL;
    setlocale(LC_NUMERIC, saved ? saved : "C");
    free(saved);
    if (!m)
        fail_msg("%s", err);
    assert_true(m->f_double == 2.5 && m->f_float == 0.25f);
    assert_string_equal(s, "f_float: 0.25 f_double: 2.5");
    free(s);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void test_round_trips(void **state)
{
    (void)state;
    assert_round_trip(AT_DESC, k_all);
    assert_round_trip(AT_DESC, "f_float: 0.1 f_double: 0.1 r_float_packed: [1e-45, 3.4028235e38, -0, nan]");
    assert_round_trip(AT_DESC, "f_double: 4.9406564584124654e-324 f_float: -0.0 o_int: -1");
    assert_round_trip(AT_DESC, "f_double: 1.7976931348623157e308 f_bytes: '\\x00\\xff\\\"' r_msg {req: 0 note: ''}");
    assert_round_trip(AT_DESC, "f_string: '\\u20ac\\U0001F600\\uD83D\\uDE00' r_enum: [-2, 7, -100]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_types_values),
        cmocka_unit_test(test_all_types_match_pack),
        cmocka_unit_test(test_scalar_encodings),
        cmocka_unit_test(test_floats),
        cmocka_unit_test(test_oneof_required_defaults),
        cmocka_unit_test(test_proto3_implicit_presence),
        cmocka_unit_test(test_print_formats),
        cmocka_unit_test(test_print_escaping),
        cmocka_unit_test(test_unknown_fields_printed),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_locale_independent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
