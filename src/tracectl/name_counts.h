/* name_counts.h: how many times each name was seen, in first-seen order (dump's summary lines:
 * payload types, slice and instant names, machines). Found through a hash index, so a trace with
 * thousands of distinct names costs one probe per event, not a scan of every name so far. At most
 * TC_NAME_COUNTS_MAX names are kept; events of further names are counted together in `other`.
 *
 * Ownership: the caller owns the struct (zero-initialised is empty) and the keys are copies;
 * tc_name_counts_free releases them. Threading: none. */
#ifndef TRACEGATE_TRACECTL_NAME_COUNTS_H
#define TRACEGATE_TRACECTL_NAME_COUNTS_H

#include <stddef.h>
#include <stdint.h>

#define TC_NAME_COUNTS_MAX 4096

struct tc_name_count {
    char *key;
    uint64_t hash;
    uint64_t n;
};

struct tc_name_counts {
    struct tc_name_count *v; /* first-seen order */
    size_t n, cap;
    size_t *slots; /* index + 1 into v; 0 = empty; n_slots a power of two, at most half full */
    size_t n_slots;
    uint64_t other; /* events of names past TC_NAME_COUNTS_MAX (or not stored: out of memory) */
};

/* Counts one event of key. */
void tc_name_counts_add(struct tc_name_counts *c, const char *key);
void tc_name_counts_free(struct tc_name_counts *c);

#endif
