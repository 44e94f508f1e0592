/*
 * process_metrics.c — the standard Prometheus process metrics
 * (process_metrics.h), read from Linux's /proc at each scrape.
 */
#include "common/process_metrics.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The fields of /proc/self/stat the families need (proc(5)). */
typedef struct process_stat {
    unsigned long long utime_ticks, stime_ticks, start_ticks, vsize_bytes;
    long long rss_pages;
} process_stat;

/* proc(5): fields 14, 15 (utime, stime), 22 (starttime), 23 (vsize) and
 * 24 (rss), counted after the command name, which is in parentheses and
 * may hold spaces and parentheses itself: the fields start after the last
 * ')'. */
static bool stat_read(process_stat *s)
{
    char line[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL)
        return false;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *p = strrchr(line, ')');
    if (p == NULL)
        return false;
    /* after ')': 3 state, 4..13 (ten), 14 utime, 15 stime, 16..21 (six),
     * 22 starttime, 23 vsize, 24 rss */
    int got = sscanf(p + 1,
                     " %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu"
                     " %*s %*s %*s %*s %*s %*s %llu %llu %lld",
                     &s->utime_ticks, &s->stime_ticks, &s->start_ticks, &s->vsize_bytes,
                     &s->rss_pages);
    return got == 5;
}

/* The boot time in seconds since the epoch ("btime" in /proc/stat). */
static bool boot_time_read(unsigned long long *out)
{
    char line[256];
    bool found = false;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "btime %llu", out) == 1;
    fclose(f);
    return found;
}

/* Entries of /proc/self/fd, without "." and ".." (the directory's own
 * descriptor is counted, as the Go and Python clients count it); -1 when
 * the directory cannot be read. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    long long count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            count++;
    closedir(d);
    return count;
}

void process_metrics_write(net_text *out)
{
    long ticks_per_s = sysconf(_SC_CLK_TCK), page_bytes = sysconf(_SC_PAGESIZE);
    process_stat s;
    unsigned long long boot_s;
    if (ticks_per_s > 0 && stat_read(&s)) {
        net_text_family(out, "process_cpu_seconds_total", "counter",
                        "Total user and system CPU time spent in seconds.");
        net_text_printf(out, "process_cpu_seconds_total %.2f\n",
                        (double)(s.utime_ticks + s.stime_ticks) / (double)ticks_per_s);
        if (boot_time_read(&boot_s)) {
            net_text_family(out, "process_start_time_seconds", "gauge",
                            "Start time of the process since unix epoch in seconds.");
            net_text_printf(out, "process_start_time_seconds %.2f\n",
                            (double)boot_s + (double)s.start_ticks / (double)ticks_per_s);
        }
        net_text_sample_u64(out, "process_virtual_memory_bytes", "gauge",
                            "Virtual memory size in bytes.", s.vsize_bytes);
        if (page_bytes > 0 && s.rss_pages >= 0)
            net_text_sample_u64(out, "process_resident_memory_bytes", "gauge",
                                "Resident memory size in bytes.",
                                (uint64_t)s.rss_pages * (uint64_t)page_bytes);
    }
    long long fds = open_fds();
    if (fds >= 0)
        net_text_sample_u64(out, "process_open_fds", "gauge", "Number of open file descriptors.",
                            (uint64_t)fds);
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0)
        net_text_sample_u64(out, "process_max_fds", "gauge",
                            "Maximum number of open file descriptors.", (uint64_t)limit.rlim_cur);
}
