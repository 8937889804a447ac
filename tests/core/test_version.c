/*
 * test_version.c: the version macros agree with each other and with what
 * the library reports at run time.
 */
#include "../helpers.h"

#include <stdio.h>
#include <string.h>

/* The macros are usable in #if, as CORRAL_VERSION_HEX's comment says. */
#if CORRAL_VERSION_HEX < 0 || CORRAL_VERSION_HEX > 0xffffff
#error "CORRAL_VERSION_HEX is out of range"
#endif

START_TEST(hex_packs_major_minor_patch)
{
    ck_assert_int_ge(CORRAL_VERSION_MAJOR, 0);
    ck_assert_int_lt(CORRAL_VERSION_MAJOR, 256);
    ck_assert_int_ge(CORRAL_VERSION_MINOR, 0);
    ck_assert_int_lt(CORRAL_VERSION_MINOR, 256);
    ck_assert_int_ge(CORRAL_VERSION_PATCH, 0);
    ck_assert_int_lt(CORRAL_VERSION_PATCH, 256);
    ck_assert_int_eq(CORRAL_VERSION_HEX, CORRAL_VERSION_MAJOR * 65536 + CORRAL_VERSION_MINOR * 256 +
                                             CORRAL_VERSION_PATCH);
}
END_TEST

START_TEST(string_spells_the_numbers)
{
    char expected[32];
    snprintf(expected, sizeof(expected), "%d.%d.%d", CORRAL_VERSION_MAJOR, CORRAL_VERSION_MINOR,
             CORRAL_VERSION_PATCH);
    ck_assert_str_eq(CORRAL_VERSION, expected);
    /* A string literal, so that it joins others, as `corral -V` does. */
    static const char joined[] = "corral " CORRAL_VERSION;
    ck_assert_str_eq(joined + strlen("corral "), expected);
}
END_TEST

START_TEST(library_reports_the_header_version)
{
    ck_assert_uint_eq(corral_version(), CORRAL_VERSION_HEX);
    ck_assert_str_eq(corral_version_string(), CORRAL_VERSION);
    /* Static storage: the same pointer every time. */
    ck_assert_ptr_eq(corral_version_string(), corral_version_string());
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/version");
    TCase *tc = tcase_create("version");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, hex_packs_major_minor_patch);
    tcase_add_test(tc, string_spells_the_numbers);
    tcase_add_test(tc, library_reports_the_header_version);
    suite_add_tcase(suite, tc);
    return suite;
}
