/* test_tracectl_span_lanes.c: the stitcher's lane layout (span_lanes.h): with fewer than
 * TC_LANES_FIRST_FIT lanes it places every span exactly where trying each lane in order would
 * (random layouts against that reference); every lane's slices nest and each span ends exactly
 * once, however many spans overlap (20,000 staggered spans, random deep overlap); an empty lane
 * past the first-fit ones is reused (the lowest first) instead of a new lane being made. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "span_lanes.h"

struct span {
    uint64_t b, e;
    size_t lane;
    int ended;
};

struct rec {
    struct span *s;
    size_t n_ends;
};

static int on_end(void *arg, size_t item)
{
    struct rec *r = arg;
    assert_int_equal(r->s[item].ended, 0);
    r->s[item].ended = 1;
    r->n_ends++;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* Lays out s[0..n) (sorted by begin); returns the number of lanes. */
static size_t lay_out(struct span *s, size_t n)
{
    struct tc_lanes l;
    memset(&l, 0, sizeof l);
    struct rec r = {s, 0};
    size_t lanes = 0;
    for (size_t i = 0; i < n; i++) {
        int is_new;
        assert_int_equal(tc_lanes_place(&l, s[i].b, s[i].e, i, on_end, &r, &s[i].lane, &is_new), 0);
        if (is_new) {
            assert_int_equal(s[i].lane, lanes);
            lanes++;
        } else {
            assert_true(s[i].lane < lanes);
        }
    }
    assert_int_equal(tc_lanes_finish(&l, on_end, &r), 0);
    tc_lanes_free(&l);
    assert_int_equal(r.n_ends, n); /* every span ended once (on_end refuses a second end) */
    return lanes;
}

/* The rule the layout must keep: on each lane, two spans either nest or do not overlap. */
static void assert_lanes_nest(const struct span *s, size_t n)
{
    /* per lane, a stack walk over the spans in begin order; the stacks are linked through below[] */
    const size_t none = SIZE_MAX;
    size_t *below = malloc(n * sizeof *below), *top = malloc(n * sizeof *top);
    assert_non_null(below);
    assert_non_null(top);
    for (size_t k = 0; k < n; k++)
        top[k] = none;
    for (size_t i = 0; i < n; i++) {
        size_t k = s[i].lane;
        assert_true(k < n);
        while (top[k] != none && s[top[k]].e <= s[i].b)
            top[k] = below[top[k]];
        if (top[k] != none)
            assert_true(s[top[k]].e >= s[i].e); /* nests in the open one */
        below[i] = top[k];
        top[k] = i;
    }
    free(below);
    free(top);
}

/* The reference: try every lane in order (what the stitcher did before). */
static void reference(const struct span *s, size_t n, size_t *lane_of)
{
    size_t **st = calloc(n, sizeof *st), *depth = calloc(n, sizeof *depth), lanes = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        for (k = 0; k < lanes; k++) {
            while (depth[k] && s[st[k][depth[k] - 1]].e <= s[i].b)
                depth[k]--;
            if (!depth[k] || s[st[k][depth[k] - 1]].e >= s[i].e)
                break;
        }
        if (k == lanes)
            st[lanes++] = malloc(n * sizeof **st);
        st[k][depth[k]++] = i;
        lane_of[i] = k;
    }
    for (size_t k = 0; k < lanes; k++)
        free(st[k]);
    free(st);
    free(depth);
}

static void random_spans(struct span *s, size_t n, uint64_t span_len, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        s[i].b = (uint64_t)(rand() % 100000);
        s[i].e = s[i].b + 1 + (uint64_t)(rand() % (int)span_len);
        s[i].ended = 0;
    }
    qsort(s, n, sizeof *s, cmp_begin);
}

static void test_same_as_trying_every_lane(void **state)
{
    (void)state;
    enum { N = 3000 };
    struct span *s = malloc(N * sizeof *s);
    size_t *ref = malloc(N * sizeof *ref);
    for (unsigned seed = 1; seed <= 20; seed++) {
        random_spans(s, N, 1000 + 100 * seed, seed); /* about 30 to 90 open at a time */
        size_t lanes = lay_out(s, N);
        assert_true(lanes < TC_LANES_FIRST_FIT);
        reference(s, N, ref);
        for (size_t i = 0; i < N; i++)
            assert_int_equal(s[i].lane, ref[i]);
        assert_lanes_nest(s, N);
    }
    free(ref);
    free(s);
}

static void test_deep_overlap_nests(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct span *s = malloc(N * sizeof *s);
    /* staggered: each begins after the previous and ends after it, so none nests: one lane each */
    for (size_t i = 0; i < N; i++)
        s[i] = (struct span){1000 + 10 * i, 1000 + 10 * i + 10 * N, 0, 0};
    assert_int_equal(lay_out(s, N), N);
    assert_lanes_nest(s, N);
    /* random, a few hundred open at a time: past the first-fit lanes */
    for (unsigned seed = 1; seed <= 5; seed++) {
        random_spans(s, N, 5000, seed);
        size_t lanes = lay_out(s, N);
        assert_true(lanes > TC_LANES_FIRST_FIT);
        assert_lanes_nest(s, N);
    }
    free(s);
}

static void test_empty_lane_reused(void **state)
{
    (void)state;
    struct span s[64 + 6 + 64 + 1];
    size_t n = 0;
    for (size_t i = 0; i < 64; i++) /* A: lanes 0..63 */
        s[n++] = (struct span){i, 1000 + i, 0, 0};
    for (size_t j = 0; j < 6; j++) /* B: end after every A, lanes 64..69 */
        s[n++] = (struct span){64 + j, 2000 + j, 0, 0};
    for (size_t i = 0; i < 64; i++) /* C: the A's have ended: lanes 0..63 again */
        s[n++] = (struct span){1100 + i, 5000 + i, 0, 0};
    /* D: after the B's ended, fits none of lanes 0..63: the lowest empty lane, 64 */
    s[n++] = (struct span){2100, 9000, 0, 0};
    assert_int_equal(lay_out(s, n), 70);
    for (size_t i = 0; i < 64; i++) {
        assert_int_equal(s[i].lane, i);
        assert_int_equal(s[70 + i].lane, i);
    }
    for (size_t j = 0; j < 6; j++)
        assert_int_equal(s[64 + j].lane, 64 + j);
    assert_int_equal(s[n - 1].lane, 64);
    assert_lanes_nest(s, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_trying_every_lane),
        cmocka_unit_test(test_deep_overlap_nests),
        cmocka_unit_test(test_empty_lane_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
