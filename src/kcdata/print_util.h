/* print_util.h: pieces shared by the text and JSON printers: names of tracegate's and the
 * generic KCDATA types, and whether a field of a definition lies inside a record. Internal. */
#ifndef TG_KCDATA_PRINT_UTIL_H
#define TG_KCDATA_PRINT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/kcdata.h"

/* Name of a container type known for buffers with this magic, or NULL. */
const char *tg_kc_container_name(uint32_t magic, uint32_t container_type);
/* Name of a generic (0x30..0x39) type, or NULL. */
const char *tg_kc_generic_type_name(uint32_t type);
/* 1 if all elements of f lie inside rec_len bytes. */
int tg_kc_field_inside(const struct tg_kcdata_field *f, size_t rec_len);
/* 1 if items of td print as one value (a single field without the STRUCT flag). */
int tg_kc_typedef_is_scalar(const struct tg_kcdata_typedef *td);

#endif
