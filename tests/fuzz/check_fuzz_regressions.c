/*
 * check_fuzz_regressions.c — the fuzz targets under `make check`: built
 * with the project's compiler (and ASan + UBSan in the sanitizer build),
 * they get every committed input in tests/fuzz/regressions/<target>/
 * (count bombs, each input that once crashed a target) and every generated
 * seed (fuzz_seeds.c). A target aborts on a broken property, which fails
 * the test; libFuzzer itself runs through tests/fuzz/fuzz.sh.
 */
#include "tests/fuzz/fuzz.h"
#include "tests/support/test_support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INPUT_BYTES_MAX (4u * 1024 * 1024)
#define SEEDS_MIN 150

typedef int (*target_fn)(const uint8_t *data, size_t size);

static const struct {
    const char *name;
    target_fn fn;
} targets[] = {
    {"request", fuzz_request_one},
    {"json", fuzz_json_one},
    {"event", fuzz_event_one},
    {"reply", fuzz_reply_one},
    {"webhook", fuzz_webhook_one},
    {"auth", fuzz_auth_one},
};
#define TARGET_COUNT (int)(sizeof(targets) / sizeof(targets[0]))

static target_fn target_named(const char *name)
{
    for (int i = 0; i < TARGET_COUNT; i++)
        if (strcmp(targets[i].name, name) == 0)
            return targets[i].fn;
    ck_abort_msg("no fuzz target %s", name);
    return NULL;
}

/* tests/fuzz/regressions of the source tree (make check sets TALLY_DOCS). */
static void regressions_dir(const char *target, char *out, size_t size)
{
    const char *docs = getenv("TALLY_DOCS");
    snprintf(out, size, "%s/../tests/fuzz/regressions/%s", docs && *docs ? docs : "docs", target);
}

static size_t read_input(const char *path, uint8_t *buf)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t n = fread(buf, 1, INPUT_BYTES_MAX, f);
    ck_assert_msg(feof(f), "%s is larger than %u bytes", path, INPUT_BYTES_MAX);
    fclose(f);
    return n;
}

START_TEST(regression_inputs_pass)
{
    char dir[1024], path[2048];
    regressions_dir(targets[_i].name, dir, sizeof(dir));
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    uint8_t *buf = malloc(INPUT_BYTES_MAX);
    unsigned count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        size_t n = read_input(path, buf);
        fprintf(stderr, "%s: %s (%zu bytes)\n", targets[_i].name, e->d_name, n);
        targets[_i].fn(buf, n);
        count++;
    }
    closedir(d);
    free(buf);
    ck_assert_msg(count > 0, "no regression inputs in %s", dir);
}
END_TEST

typedef struct seed_counts {
    long per_target[TARGET_COUNT];
} seed_counts;

static void run_seed(const char *target, const char *name, const uint8_t *data, size_t size,
                     void *ctx)
{
    seed_counts *c = ctx;
    (void)name;
    target_named(target)(data, size);
    for (int i = 0; i < TARGET_COUNT; i++)
        c->per_target[i] += strcmp(targets[i].name, target) == 0;
}

START_TEST(generated_seeds_pass)
{
    seed_counts c = {{0}};
    long n = fuzz_seeds_each(run_seed, &c);
    ck_assert_msg(n >= SEEDS_MIN, "%ld seeds generated (see stderr)", n);
    for (int i = 0; i < TARGET_COUNT; i++)
        ck_assert_msg(c.per_target[i] > 0, "no seeds for %s", targets[i].name);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fuzz_regressions");
    TCase *tc = tcase_create("inputs");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, regression_inputs_pass, 0, TARGET_COUNT);
    tcase_add_test(tc, generated_seeds_pass);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
