/*
 * check_error.c — tests of common/error: every code has a unique, stable,
 * lower-case name that round-trips through tally_error_from_name, and its
 * class decides whether its outcome is stored in the inbox.
 *
 * Names are wire codes, so a few are pinned here literally: renaming one
 * breaks clients and must fail this suite.
 */
#include "common/error.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <string.h>

#define CODE_SCAN_MAX 200

static bool is_known(int code) { return strcmp(tally_strerror(code), "unknown_error") != 0; }

/* Lower-case snake case; digits after the first character, as in the
 * field names that exists_with_different_<field> names carry
 * (user_data_128). */
static bool name_is_lower_snake(const char *name)
{
    if (*name == '\0' || *name == '_' || (*name >= '0' && *name <= '9'))
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

#define COUNT_ONE(name, number, cls) +1
static const int codes_declared = 0 TALLY_ERRORS(COUNT_ONE);
#undef COUNT_ONE

#define NUMBER_OF(name, number, cls) number,
static const int declared_numbers[] = {TALLY_ERRORS(NUMBER_OF)};
#undef NUMBER_OF

static bool is_declared(int code)
{
    for (size_t i = 0; i < sizeof(declared_numbers) / sizeof(declared_numbers[0]); i++)
        if (declared_numbers[i] == code)
            return true;
    return false;
}

START_TEST(names_are_unique_lower_case_and_round_trip)
{
    const char *seen[CODE_SCAN_MAX + 1];
    int known = 0;
    for (int code = 0; code <= CODE_SCAN_MAX; code++) {
        const char *name = tally_strerror(code);
        ck_assert_ptr_nonnull(name);
        if (!is_known(code))
            continue;
        ck_assert_msg(name_is_lower_snake(name), "code %d has name \"%s\"", code, name);
        for (int i = 0; i < known; i++)
            ck_assert_msg(strcmp(seen[i], name) != 0, "name \"%s\" used twice", name);
        seen[known++] = name;
        ck_assert_msg(tally_error_from_name(name) == code, "%s -> %d, want %d", name,
                      tally_error_from_name(name), code);
        /* Names are stable: the same pointer contents on every call. */
        ck_assert_str_eq(tally_strerror(code), name);
    }
    ck_assert_int_eq(known, codes_declared);
}
END_TEST

START_TEST(every_declared_code_is_named_after_its_enum)
{
#define CHECK_NAME(name, number, cls)                                                      \
    ck_assert_int_eq(TALLY_##name, number);                                                \
    ck_assert_str_eq(tally_strerror(TALLY_##name), #name);                                 \
    ck_assert_int_eq(tally_error_from_name(#name), number);                                \
    ck_assert_int_le(number, CODE_SCAN_MAX);
    TALLY_ERRORS(CHECK_NAME)
#undef CHECK_NAME
}
END_TEST

START_TEST(unknown_codes_and_names)
{
    /* Gaps in the numbering and values outside it are unknown faults. */
    int gaps = 0;
    for (int code = 0; code <= CODE_SCAN_MAX; code++) {
        ck_assert_int_eq(is_known(code), is_declared(code));
        if (is_declared(code))
            continue;
        gaps++;
        ck_assert_int_eq(tally_error_class_of(code), TALLY_CLASS_FAULT);
        ck_assert(!tally_error_is_stored(code));
    }
    ck_assert_int_gt(gaps, 0);
    const int outside[] = {-1, -30798, CODE_SCAN_MAX + 1, 65535, 1 << 30};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        ck_assert_str_eq(tally_strerror(outside[i]), "unknown_error");
        ck_assert_int_eq(tally_error_class_of(outside[i]), TALLY_CLASS_FAULT);
        ck_assert(!tally_error_is_stored(outside[i]));
    }
    ck_assert_int_eq(tally_error_from_name("unknown_error"), -1);
    ck_assert_int_eq(tally_error_from_name(""), -1);
    ck_assert_int_eq(tally_error_from_name("EXCEEDS_CREDITS"), -1);
    ck_assert_int_eq(tally_error_from_name("exceeds_credits "), -1);
    ck_assert_int_eq(tally_error_from_name("exceeds"), -1);
}
END_TEST

START_TEST(classes_decide_what_is_stored)
{
    int counts[4] = {0};
    for (int code = 0; code <= CODE_SCAN_MAX; code++) {
        if (!is_known(code))
            continue;
        tally_error_class cls = tally_error_class_of(code);
        ck_assert_int_ge(cls, TALLY_CLASS_BUSINESS);
        ck_assert_int_le(cls, TALLY_CLASS_FAULT);
        counts[cls]++;
        bool stored = tally_error_is_stored(code);
        bool decided = tally_error_is_decided(code);
        switch (cls) {
        case TALLY_CLASS_BUSINESS: /* decided against the store: stored */
            ck_assert_msg(stored && decided, "%s (business) is not stored", tally_strerror(code));
            break;
        case TALLY_CLASS_VALIDATION: /* answered, the key stays free */
            ck_assert_msg(!stored && decided, "%s (invalid command) is stored",
                          tally_strerror(code));
            break;
        case TALLY_CLASS_REQUEST:
        case TALLY_CLASS_FAULT:
            ck_assert_msg(!stored && !decided, "%s is stored", tally_strerror(code));
            break;
        }
    }
    for (int cls = 0; cls < 4; cls++)
        ck_assert_msg(counts[cls] > 0, "class %d has no code", cls);
    /* Faults are numbered first, below every stored code. */
    for (int code = 1; code < TALLY_idempotency_key_reused; code++)
        if (is_known(code))
            ck_assert_int_eq(tally_error_class_of(code), TALLY_CLASS_FAULT);
}
END_TEST

START_TEST(pinned_values)
{
    ck_assert_int_eq(TALLY_ok, 0);
    ck_assert_str_eq(tally_strerror(0), "ok");
    ck_assert_int_eq(tally_error_from_name("ok"), 0);
    ck_assert(tally_error_is_stored(TALLY_ok));

    ck_assert_int_eq(tally_error_from_name("storage_full"), 1);
    ck_assert_str_eq(tally_strerror(TALLY_storage_full), "storage_full");
    ck_assert_int_eq(tally_error_class_of(TALLY_storage_full), TALLY_CLASS_FAULT);
    ck_assert(!tally_error_is_stored(TALLY_storage_full));

    ck_assert_int_eq(tally_error_from_name("exceeds_credits"), 72);
    ck_assert_str_eq(tally_strerror(72), "exceeds_credits");
    ck_assert_int_eq(tally_error_class_of(TALLY_exceeds_credits), TALLY_CLASS_BUSINESS);
    ck_assert(tally_error_is_stored(TALLY_exceeds_credits));

    ck_assert_int_eq(tally_error_from_name("idempotency_key_reused"), 20);
    ck_assert_str_eq(tally_strerror(20), "idempotency_key_reused");
    ck_assert_int_eq(tally_error_class_of(TALLY_idempotency_key_reused), TALLY_CLASS_REQUEST);
    ck_assert(!tally_error_is_stored(TALLY_idempotency_key_reused));

    ck_assert_str_eq(tally_strerror(TALLY_io_error), "io_error");
    ck_assert_str_eq(tally_strerror(TALLY_internal), "internal");
    ck_assert_str_eq(tally_strerror(TALLY_corrupt_record), "corrupt_record");
    ck_assert_str_eq(tally_strerror(TALLY_store_locked), "store_locked");
    ck_assert_str_eq(tally_strerror(TALLY_exceeds_debits), "exceeds_debits");
    ck_assert_str_eq(tally_strerror(TALLY_linked_operation_failed), "linked_operation_failed");
    ck_assert_str_eq(tally_strerror(TALLY_pending_transfer_expired), "pending_transfer_expired");

    ck_assert_int_eq(tally_error_class_of(TALLY_amount_must_not_be_zero),
                     TALLY_CLASS_VALIDATION);
    ck_assert(!tally_error_is_stored(TALLY_amount_must_not_be_zero));
    ck_assert(tally_error_is_decided(TALLY_amount_must_not_be_zero));
    ck_assert_int_eq(tally_error_class_of(TALLY_key_too_long), TALLY_CLASS_REQUEST);
    ck_assert(!tally_error_is_stored(TALLY_key_too_long));
    ck_assert(!tally_error_is_stored(TALLY_consumer_must_not_be_empty));
    ck_assert(!tally_error_is_stored(TALLY_io_error));
    ck_assert(!tally_error_is_stored(TALLY_transaction_full));
}
END_TEST

static Suite *error_suite(void)
{
    const test_row tests[] = {
        {"names", names_are_unique_lower_case_and_round_trip, 0},
        {"enum_names", every_declared_code_is_named_after_its_enum, 0},
        {"unknown", unknown_codes_and_names, 0},
        {"classes", classes_decide_what_is_stored, 0},
        {"pinned", pinned_values, 0},
    };
    return test_suite_of_rows("error", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(error_suite()); }
