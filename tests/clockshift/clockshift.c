/*
 * clockshift: an LD_PRELOAD library that moves a process's wall clock by an offset read
 * from a file, for the torture run's "clock jumped forward" scenarios (redis-server
 * expires keys by the wall clock).
 *
 *   DISTLOCK_CLOCK_FILE=/path/offset LD_PRELOAD=/path/libclockshift.so redis-server ...
 *
 * The file holds whole seconds ("0", "3600"); it is read again every 20 ms of monotonic
 * time, so writing it makes the clock jump while the process runs. Only the wall clock
 * moves (clock_gettime CLOCK_REALTIME / CLOCK_REALTIME_COARSE, gettimeofday, time), as an
 * NTP step or a bad RTC would move it; CLOCK_MONOTONIC does not.
 *
 * Why not libfaketime (Debian's faketime package): it deadlocks redis-server at start-up.
 * Its initialisation calls dlsym, which allocates through jemalloc (redis-server's
 * allocator), whose initialisation calls clock_gettime back into the uninitialised
 * libfaketime (libfaketime issue #130, unresolved). This library reads the real clock with
 * the raw system call and allocates nothing, so it has no such cycle.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL

static _Atomic long long offset_ns;
static _Atomic long long next_read_ns;

static int real_clock(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static long long offset(void) {
    struct timespec m;
    if (real_clock(CLOCK_MONOTONIC, &m) != 0) {
        return atomic_load(&offset_ns);
    }
    long long now = m.tv_sec * NS + m.tv_nsec;
    if (now >= atomic_load(&next_read_ns)) {
        atomic_store(&next_read_ns, now + 20000000LL);
        const char *path = getenv("DISTLOCK_CLOCK_FILE");
        if (path != NULL) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                char buf[32];
                ssize_t n = read(fd, buf, sizeof buf - 1);
                close(fd);
                if (n > 0) {
                    buf[n] = 0;
                    atomic_store(&offset_ns, atoll(buf) * NS);
                }
            }
        }
    }
    return atomic_load(&offset_ns);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real_clock(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long t = ts->tv_sec * NS + ts->tv_nsec + offset();
        ts->tv_sec = (time_t)(t / NS);
        ts->tv_nsec = (long)(t % NS);
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
