/* stats_print.h: the text form of a gateway's stats snapshot (`tracectl stats`): the node line,
 * then one "name value" line per counter of each stats container. Every string from the buffer
 * (node name and version, counter names, string values) is escaped as the logger escapes text
 * (tg_escape_text: control bytes, C1 controls and bytes that are not UTF-8 as escapes), so a
 * hostile or broken gateway cannot send terminal control sequences to the user's terminal.
 * Pure function of its input; no global state. */
#ifndef TRACEGATE_TRACECTL_STATS_PRINT_H
#define TRACEGATE_TRACECTL_STATS_PRINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Prints the KCDATA snapshot buf[0..len) to out. Returns 0, or -1 with the reason in err when the
 * buffer is not valid KCDATA (what was printed before the fault stays printed). */
int tc_stats_print(FILE *out, const uint8_t *buf, size_t len, char *err, size_t errlen);

#endif
