/* fuzz_check.h: the fuzz targets' invariant check: a broken invariant traps, which libFuzzer and
 * the _regress replays (tests/fuzz/standalone.c) report as a crash with the input that caused it. */
#ifndef TRACEGATE_TESTS_FUZZ_CHECK_H
#define TRACEGATE_TESTS_FUZZ_CHECK_H

#define CHECK(x)                                                                                                   \
    do {                                                                                                           \
        if (!(x))                                                                                                  \
            __builtin_trap();                                                                                      \
    } while (0)

#endif
