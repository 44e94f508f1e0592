/*
 * progress.c — the progress line (progress.h): when to print it and how it
 * reads. Shared by tally-recon, the tally CLI (backup) and tally-bench.
 */
#include "config.h"

#include "common/progress.h"

#include "common/clock.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void progress_init(progress *p, const char *prefix, progress_mode mode, progress_unit unit)
{
    assert(p && prefix);
    *p = (progress){.prefix = prefix, .unit = unit, .last_ms = -1,
                    .last_call_ms = clock_mono_ms()};
    p->on = mode == PROGRESS_ON || (mode == PROGRESS_AUTO && isatty(STDERR_FILENO));
}

/* v as a count (12345, 45.2k, 3.1M) or a size (512 B, 12.0 MiB). */
static void format_amount(const progress *p, double v, char *out, size_t size)
{
    static const char *const count_units[] = {"", "k", "M", "G", "T"};
    static const char *const byte_units[] = {" B", " KiB", " MiB", " GiB", " TiB"};
    const char *const *units = p->unit == PROGRESS_BYTES ? byte_units : count_units;
    double step = p->unit == PROGRESS_BYTES ? 1024.0 : 1000.0;
    int i = 0;
    while (v >= step && i < 4) {
        v /= step;
        i++;
    }
    if (i == 0)
        snprintf(out, size, "%.0f%s", v, units[0]);
    else
        snprintf(out, size, "%.1f%s", v, units[i]);
}

static void format_eta(double seconds, char *out, size_t size)
{
    if (!(seconds >= 0) || seconds > 359999) { /* also NaN */
        snprintf(out, size, "?");
        return;
    }
    unsigned s = (unsigned)(seconds + 0.5);
    if (s >= 3600)
        snprintf(out, size, "%u:%02u:%02u", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, size, "%u:%02u", s / 60, s % 60);
}

/* Whether to write now; starts a new phase when label changed. */
static bool progress_due(progress *p, const char *label, bool final, int64_t now)
{
    if (!p->on)
        return false;
    bool new_phase = strncmp(p->label, label, sizeof(p->label) - 1) != 0;
    if (new_phase) {
        snprintf(p->label, sizeof(p->label), "%s", label);
        p->phase_start_ms = p->last_call_ms;
    }
    p->last_call_ms = now;
    if (!new_phase && !final && p->last_ms >= 0 && now - p->last_ms < PROGRESS_INTERVAL_MS)
        return false;
    p->last_ms = now;
    p->shown = true;
    return true;
}

void progress_update(progress *p, const char *label, uint64_t done, uint64_t total)
{
    int64_t now = clock_mono_ms();
    if (!progress_due(p, label, total && done >= total, now))
        return;
    double seconds = (double)(now - p->phase_start_ms) / 1000.0;
    double rate = seconds > 0 ? (double)done / seconds : 0;
    char done_text[24], total_text[24], rate_text[24], eta[24];
    format_amount(p, (double)done, done_text, sizeof(done_text));
    format_amount(p, rate, rate_text, sizeof(rate_text));
    if (total == 0) {
        fprintf(stderr, "\r\033[K%s: %s %s, %s/s", p->prefix, p->label, done_text, rate_text);
    } else {
        format_amount(p, (double)total, total_text, sizeof(total_text));
        format_eta(rate > 0 && done <= total ? (double)(total - done) / rate : -1, eta,
                   sizeof(eta));
        fprintf(stderr, "\r\033[K%s: %s %s/%s (%.0f%%), %s/s, ETA %s", p->prefix, p->label,
                done_text, total_text, done <= total ? 100.0 * (double)done / (double)total : 100.0,
                rate_text, eta);
    }
    fflush(stderr);
}

void progress_update_timed(progress *p, const char *label, uint64_t done, int64_t elapsed_ms,
                           int64_t duration_ms)
{
    int64_t now = clock_mono_ms();
    if (!progress_due(p, label, elapsed_ms >= duration_ms, now))
        return;
    double seconds = (double)elapsed_ms / 1000.0;
    double rate = seconds > 0 ? (double)done / seconds : 0;
    char done_text[24], rate_text[24], eta[24];
    format_amount(p, (double)done, done_text, sizeof(done_text));
    format_amount(p, rate, rate_text, sizeof(rate_text));
    double share = duration_ms > 0 ? (double)elapsed_ms / (double)duration_ms : 1;
    format_eta(share < 1 ? (double)(duration_ms - elapsed_ms) / 1000.0 : 0, eta, sizeof(eta));
    fprintf(stderr, "\r\033[K%s: %s %s, %s/s, %.1f/%.1f s (%.0f%%), ETA %s", p->prefix, p->label,
            done_text, rate_text, seconds, (double)duration_ms / 1000.0,
            100.0 * (share < 1 ? share : 1), eta);
    fflush(stderr);
}

void progress_end(progress *p)
{
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = false;
}

int progress_option_parse(const options_row *row, void *target, const char *text, char *why,
                          size_t why_size)
{
    (void)text, (void)why, (void)why_size;
    bool off = strcmp(row->name, "no-progress") == 0;
    assert(off || strcmp(row->name, "progress") == 0);
    *(progress_mode *)(void *)((char *)target + row->offset) = off ? PROGRESS_OFF : PROGRESS_ON;
    return 0;
}
