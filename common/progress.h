/*
 * progress.h — the progress line of long-running tools (tally-recon,
 * `tally backup`, tally-bench): one line on stderr that is rewritten in
 * place with '\r' (done/total, percent, rate, ETA), shown when stderr is a
 * terminal or when forced with --progress, never with --no-progress.
 *
 * It writes only to stderr, so stdout (the reports, --json) never changes.
 * The first update prints at once; later ones at most every
 * PROGRESS_INTERVAL_MS, so a caller may call progress_update as often as it
 * likes (the cost is a clock read); progress_end clears the line.
 *
 * One progress is used by one thread at a time.
 */
#ifndef TALLY_PROGRESS_H
#define TALLY_PROGRESS_H

#include "common/options.h"

#include <stdbool.h>
#include <stdint.h>

/* At most 1000 / PROGRESS_INTERVAL_MS lines a second. */
#define PROGRESS_INTERVAL_MS 150
#define PROGRESS_LABEL_BYTES 32

typedef enum progress_mode {
    PROGRESS_AUTO, /* when stderr is a terminal */
    PROGRESS_ON,   /* --progress */
    PROGRESS_OFF,  /* --no-progress */
} progress_mode;

/* The option table's parse function of --progress (PROGRESS_ON) and
 * --no-progress (PROGRESS_OFF): a progress_mode at row->offset. */
int progress_option_parse(const options_row *row, void *target, const char *text, char *why,
                          size_t why_size);

/* The two rows, for a progress_mode field of struct type; the last given
 * wins. */
#define PROGRESS_OPTION_ROWS(type, field)                                                   \
    {"progress", NULL, NULL, "show progress on stderr even when it is not a terminal",      \
     progress_option_parse, 0, 0, 0, OPTIONS_STORE_NONE, offsetof(type, field), 1},         \
    {"no-progress", NULL, NULL, "never show progress", progress_option_parse, 0, 0, 0,      \
     OPTIONS_STORE_NONE, offsetof(type, field), 1}

typedef enum progress_unit {
    PROGRESS_ITEMS, /* counts: 12345/100000, 45.2k/s */
    PROGRESS_BYTES, /* sizes: 12.0 MiB/96.0 MiB, 30.1 MiB/s */
} progress_unit;

typedef struct progress {
    bool on;
    const char *prefix;  /* "tally-recon" */
    progress_unit unit;
    bool shown;          /* a line is on the screen */
    int64_t last_ms;     /* when the line was last written; -1 never */
    int64_t last_call_ms; /* the last update, shown or not (init: its time) */
    int64_t phase_start_ms;
    char label[PROGRESS_LABEL_BYTES]; /* the phase; its rate counts from its start */
} progress;

/* Decide whether to show progress (mode, and for PROGRESS_AUTO whether
 * stderr is a terminal). prefix must outlive p. */
void progress_init(progress *p, const char *prefix, progress_mode mode, progress_unit unit);

/* The line "PREFIX: LABEL DONE/TOTAL (P%) RATE/s ETA M:SS" (without total:
 * "PREFIX: LABEL DONE RATE/s"). A new label starts a new phase: its rate
 * and ETA count from the previous update (the end of the last phase), or
 * from progress_init for the first. Printed at once the first time and in a new
 * phase, else only when PROGRESS_INTERVAL_MS passed or done == total. */
void progress_update(progress *p, const char *label, uint64_t done, uint64_t total);

/* A timed run: "PREFIX: LABEL DONE, RATE/s, ELAPSED/DURATION s (P%) ETA
 * M:SS": done items so far, the percent and ETA of the time. */
void progress_update_timed(progress *p, const char *label, uint64_t done, int64_t elapsed_ms,
                           int64_t duration_ms);

/* Clear the line (when one was shown). */
void progress_end(progress *p);

#endif
