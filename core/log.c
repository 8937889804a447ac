/*
 * log.c: the library's log sink.  Lines go to a user callback or, by
 * default, to stderr with an ISO-8601 UTC timestamp and the level.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static corral_log_fn log_fn;
static void *log_arg;
static _Atomic int log_threshold = CORRAL_LOG_INFO;

void corral_set_logger(corral_log_fn fn, void *arg)
{
    log_fn = fn;
    log_arg = arg;
}

void corral_set_log_level(enum corral_log_level level)
{
    atomic_store(&log_threshold, (int)level);
}

const char *corral_log_level_name(enum corral_log_level level)
{
    switch (level) {
    case CORRAL_LOG_ERROR: return "error";
    case CORRAL_LOG_WARN: return "warn";
    case CORRAL_LOG_INFO: return "info";
    case CORRAL_LOG_DEBUG: return "debug";
    }
    return "?";
}

size_t corral_log_prefix(enum corral_log_level level, char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, corral_log_level_name(level));
    if (n <= 0 || size == 0)
        return 0;
    return (size_t)n < size ? (size_t)n : size - 1;
}

void corral_log(enum corral_log_level level, const char *fmt, ...)
{
    if ((int)level > atomic_load_explicit(&log_threshold, memory_order_relaxed))
        return;

    /* Bounded, as logging allocates nothing; a longer line (a path or an
     * address from the config, say) is cut visibly, never silently. */
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(message))
        memcpy(message + sizeof(message) - 4, "...", 4);

    if (log_fn != NULL) {
        log_fn(level, message, log_arg);
        return;
    }
    char prefix[CORRAL_LOG_PREFIX_MAX];
    corral_log_prefix(level, prefix, sizeof(prefix));
    /* One fprintf per line: stdio locks the stream, so threads never interleave. */
    fprintf(stderr, "%s%s\n", prefix, message);
}
