// What a background writer does to the latency of small durable appends,
// outside kaas (docs/performance.md, "What the acks wait behind").
//
//   gcc -O2 -pthread -o target/flush_probe scripts/bench_tool/flush_probe.c
//   target/flush_probe DIR LAYOUT SECONDS WRITER
//
// The probe appends 1 KiB and fdatasyncs it every millisecond (an acks=all
// producer at 1,000 msg/s), in a file laid out as LAYOUT:
//   grow      plain appends, each growing the file;
//   zeroed    256 MiB written as zeros and synced first, then overwritten
//             in place (no allocation, no size change at the append);
//   keepsize  256 MiB fallocated beyond the end (FALLOC_FL_KEEP_SIZE).
// Meanwhile a second thread plays a cleaner's round, again and again:
// twelve 16 MiB copies written in 1 MiB writes, each fsynced, then all
// unlinked and the directory synced. WRITER:
//   0  no writer (the baseline);
//   1  copies written as fast as the disk takes them;
//   2  paced: a 1 MiB write every PACE_US microseconds (default 15625,
//      64 MiB/s, kaas's default cleaner budget);
//   3  paced, and each 1 MiB written back at once (sync_file_range) rather
//      than left to the copy's fsync.
//   4  as 3, and the copies removed one at a time, PACE_US * 16 apart (as
//      kaas's paced removal spaces the segments a swap replaced);
//   5  as 4, but each copy cut down 1 MiB at a time from its end
//      (ftruncate), PACE_US apart, before its unlink: the same pace of
//      freed blocks, in pieces a sixteenth the size.
// WRITE_BACK=fadvise (writers 3-5): start each 1 MiB's write-back with
// posix_fadvise(DONTNEED), which waits for none of it, as kaas's cleaner
// does (`SegmentFile::start_write_back`), instead of sync_file_range's
// wait; WRITE_BACK=none: no write-back of its own. CHUNK_KIB (default
// 1024): the copies' write size, each written back on its own, the pause
// after it scaled to keep the same rate.
// Prints the appends' latency percentiles and how many took over 3 ms.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1L << 20)

static volatile int stop = 0;
static const char *dir;
static int writer = 0;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *cleaner(void *arg) {
    (void)arg;
    const char *pace = getenv("PACE_US");
    useconds_t pace_us = pace ? (useconds_t)atoi(pace) : 15625;
    char *buf = malloc(MIB);
    memset(buf, 'c', MIB);
    const char *chunk_kib = getenv("CHUNK_KIB");
    long chunk = chunk_kib ? atol(chunk_kib) * 1024 : MIB;
    if (chunk <= 0 || chunk > MIB || MIB % chunk) exit(2);
    long chunks = 16 * MIB / chunk;
    pace_us = (useconds_t)((long)pace_us * chunk / MIB);
    const char *wb = getenv("WRITE_BACK");
    int write_back = !wb ? 1 : !strcmp(wb, "fadvise") ? 2 : !strcmp(wb, "none") ? 0 : 1;
    char path[512];
    for (long round = 0; !stop && writer > 0; round++) {
        for (int f = 0; f < 12 && !stop; f++) {
            snprintf(path, sizeof path, "%s/copy-%ld-%d", dir, round, f);
            int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
            if (fd < 0) exit(3);
            for (long i = 0; i < chunks; i++) {
                if (write(fd, buf, chunk) != chunk) exit(3);
                if (writer >= 3 && write_back == 1)
                    sync_file_range(fd, i * chunk, chunk,
                                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                        SYNC_FILE_RANGE_WAIT_AFTER);
                if (writer >= 3 && write_back == 2)
                    posix_fadvise(fd, i * chunk, chunk, POSIX_FADV_DONTNEED);
                if (writer >= 2) usleep(pace_us);
            }
            fsync(fd);
            close(fd);
        }
        for (int f = 0; f < 12; f++) {
            snprintf(path, sizeof path, "%s/copy-%ld-%d", dir, round, f);
            if (writer >= 5) {
                int fd = open(path, O_WRONLY);
                for (long size = 16 * MIB - chunk; fd >= 0 && size >= 0 && !stop; size -= chunk) {
                    if (ftruncate(fd, size)) exit(3);
                    usleep(pace_us);
                }
                if (fd >= 0) close(fd);
            }
            unlink(path);
            if (writer == 4) usleep(pace_us * chunks);
        }
        int d = open(dir, O_RDONLY);
        fsync(d);
        close(d);
    }
    free(buf);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: flush_probe DIR grow|zeroed|keepsize SECONDS WRITER(0-5)\n");
        return 2;
    }
    dir = argv[1];
    const char *layout = argv[2];
    int seconds = atoi(argv[3]);
    writer = atoi(argv[4]);
    char path[512];
    snprintf(path, sizeof path, "%s/probe.log", dir);
    unlink(path);
    int fd = open(path, O_CREAT | O_RDWR, 0644);
    if (fd < 0) return 3;
    const long capacity = 256 * MIB;
    if (!strcmp(layout, "zeroed")) {
        char *zeros = calloc(1, MIB);
        for (long at = 0; at < capacity; at += MIB)
            if (write(fd, zeros, MIB) != MIB) return 3;
        free(zeros);
    } else if (!strcmp(layout, "keepsize")) {
        if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, capacity)) return 3;
    } else if (strcmp(layout, "grow")) {
        return 2;
    }
    fsync(fd);
    int d = open(dir, O_RDONLY);
    fsync(d);
    close(d);

    pthread_t thread;
    pthread_create(&thread, NULL, cleaner, NULL);
    int wanted = seconds * 1000, n = 0;
    double *latency = malloc(sizeof(double) * wanted);
    char record[1024];
    memset(record, 'r', sizeof record);
    long offset = 0;
    double start = now_ms();
    while (n < wanted && now_ms() - start < seconds * 1000.0) {
        double before = now_ms();
        if (pwrite(fd, record, sizeof record, offset) != (ssize_t)sizeof record) return 3;
        fdatasync(fd);
        latency[n++] = now_ms() - before;
        offset = (offset + (long)sizeof record) % capacity;
        double wait = start + n - now_ms();
        if (wait > 0) usleep((useconds_t)(wait * 1000));
    }
    stop = 1;
    pthread_join(thread, NULL);
    unlink(path);
    qsort(latency, n, sizeof(double), by_value);
    int slow = 0;
    for (int i = 0; i < n; i++) slow += latency[i] > 3.0;
    printf("%-8s writer=%d appends=%d p50=%.2f p99=%.2f p99.9=%.2f max=%.2f over_3ms=%d\n",
           layout, writer, n, latency[n / 2], latency[n * 99 / 100], latency[n * 999 / 1000],
           latency[n - 1], slow);
    free(latency);
    return 0;
}
