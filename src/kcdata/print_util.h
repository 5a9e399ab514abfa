/* print_util.h: pieces shared by the text and JSON printers: names of tracegate's and the
 * generic KCDATA types, whether a field of a definition lies inside a record, and a field's value
 * written in either printer's style. Internal. */
#ifndef TG_KCDATA_PRINT_UTIL_H
#define TG_KCDATA_PRINT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tracegate/kcdata.h"

/* Name of a container type known for buffers with this magic, or NULL. */
const char *tg_kc_container_name(uint32_t magic, uint32_t container_type);
/* Name of a generic (0x30..0x39) type, or NULL. */
const char *tg_kc_generic_type_name(uint32_t type);
/* 1 if all elements of f lie inside rec_len bytes. */
int tg_kc_field_inside(const struct tg_kcdata_field *f, size_t rec_len);
/* 1 if items of td print as one value (a single field without the STRUCT flag). */
int tg_kc_typedef_is_scalar(const struct tg_kcdata_typedef *td);

/* How a printer writes a field's value: what stands for a field beyond the record, how a string
 * is quoted, what separates array elements, and how a lone unsigned value is written (numbers in
 * an array are always plain decimal). */
struct tg_kc_value_style {
    const char *missing;
    void (*string)(FILE *out, const uint8_t *s, size_t n);
    const char *separator;
    void (*scalar_uint)(FILE *out, uint64_t v);
};

/* The value of field f in rec (rec_len bytes): a string for char fields (up to the first NUL), a
 * number, or [a, b, ...] for arrays. */
void tg_kc_field_value(FILE *out, const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len,
                       const struct tg_kc_value_style *style);

#endif
