/* node_name.h: the syntax of a tracegate node name, one rule for the gateway (which refuses other
 * names on links and routes) and tracectl (which writes only such names into files it keeps):
 * [A-Za-z0-9._-]{1,63}, not "." or "..", not starting with '@' (reserved for groups such as
 * "@all"). Threading: any thread; no state. */
#ifndef TG_BASE_NODE_NAME_H
#define TG_BASE_NODE_NAME_H

#include <stddef.h>

#define TG_NODE_NAME_MAX 63

/* 1 when name (NUL-terminated) is a valid node name, else 0. */
int tg_node_name_ok(const char *name);
/* 1 when the n bytes at s are all [A-Za-z0-9._-], else 0 (also for keys built from them). */
int tg_node_name_chars_ok(const char *s, size_t n);

#endif
