/*
 * backup_progress.c — the progress line of `tally backup` (common/progress.h).
 *
 * tallyd copies the store itself (mdb_env_copy2, compacting) and answers
 * once the copy is done, so the reply carries no progress. What the CLI can
 * see is the copy growing: DEST is on tallyd's machine, which is where the
 * CLI runs when an operator takes a backup, so a thread polls the size of
 * DEST/data.mdb while the request waits and shows it against the store's
 * used size (stats' map_used_bytes, read before the backup). The compacted
 * copy leaves out free pages, so it may end below 100 %; when the CLI cannot
 * see DEST (another machine, or a directory it may not read) the line
 * stays at 0 bytes and shows the time running.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"
#include "common/progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define BACKUP_POLL_MS 50

struct backup_progress {
    progress line;
    char data_path[TALLY_PATH_BYTES_MAX + 16];
    uint64_t total_bytes;
    atomic_bool stop;
    pthread_t thread;
};

static void *poll_main(void *arg)
{
    backup_progress *bp = arg;
    const struct timespec pause = {0, BACKUP_POLL_MS * 1000000L};
    /* At least one line, even when the backup ends before this thread
     * first runs: the first update prints at once. */
    for (;;) {
        struct stat sb;
        uint64_t done = stat(bp->data_path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        /* done may pass total (the store grew); the line says 100 % then. */
        progress_update(&bp->line, "copied", done,
                        bp->total_bytes > done ? bp->total_bytes : done);
        if (atomic_load(&bp->stop))
            return NULL;
        nanosleep(&pause, NULL);
    }
}

backup_progress *backup_progress_start(cli *c, const char *dest)
{
    progress_mode mode = c->v[SLOT_NO_PROGRESS].set ? PROGRESS_OFF
                         : c->v[SLOT_PROGRESS].set  ? PROGRESS_ON
                                                    : PROGRESS_AUTO;
    progress line;
    progress_init(&line, "tally backup", mode, PROGRESS_BYTES);
    if (!line.on)
        return NULL;
    backup_progress *bp = calloc(1, sizeof(*bp));
    if (bp == NULL)
        return NULL; /* no progress, the backup still runs */
    bp->line = line;
    snprintf(bp->data_path, sizeof(bp->data_path), "%s/data.mdb", dest);
    tally_stats s;
    memset(&s, 0, sizeof(s));
    if (tally_stats_get(c->client, &s) == TALLY_ok)
        bp->total_bytes = s.map_used_bytes;
    atomic_init(&bp->stop, false);
    if (pthread_create(&bp->thread, NULL, poll_main, bp) != 0) {
        free(bp);
        return NULL;
    }
    return bp;
}

void backup_progress_stop(backup_progress *bp)
{
    if (bp == NULL)
        return;
    atomic_store(&bp->stop, true);
    pthread_join(bp->thread, NULL);
    progress_end(&bp->line);
    free(bp);
}
