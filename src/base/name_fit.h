/* name_fit.h: a name (a certificate subject, a principal) in a fixed-size buffer without two
 * different names ever ending up as the same text. Cutting a long name short would make every
 * name that shares the kept prefix one and the same principal; a name that does not fit keeps its
 * start and ends in "~" and 32 hex digits of its SHA-256 instead. Pure function; thread-safe. */
#ifndef TRACEGATE_BASE_NAME_FIT_H
#define TRACEGATE_BASE_NAME_FIT_H

#include <stddef.h>

/* Room a digest ending takes: "~" and 32 hex digits. */
#define TG_NAME_FIT_DIGEST_LEN 33

/* Writes prefix followed by name to out (cap bytes, NUL included). Written as is when the whole
 * text is at most cap - 1 - TG_NAME_FIT_DIGEST_LEN - 1 characters; otherwise as exactly cap - 1
 * characters: the start of prefix+name, "~", and the first 16 bytes of SHA-256(prefix+name) in
 * hex. The two forms have different lengths, so a literal name can never equal a digest form.
 * cap must be more than 2 * TG_NAME_FIT_DIGEST_LEN. Returns 1 if the digest form was used, 0 if
 * not, -1 if cap is too small or no digest could be made (out is then "" if cap > 0): callers
 * treat that name as unusable. */
int tg_name_fit(char *out, size_t cap, const char *prefix, const char *name);

#endif
