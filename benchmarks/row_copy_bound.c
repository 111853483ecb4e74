/* What two cores of this machine can do on the embedding lookup of the benchmark, without XLA:
 * 8192 random rows of 512 float32 from a 50000x512 table, copied by an OpenMP loop five ways
 * (glibc memcpy per row, the unrolled 256-bit copy that XLA:CPU emits for the gather, the same
 * with the next row prefetched, non-temporal stores, `rep movsb`). docs/performance.md compares
 * these times with jax_gather's and onnxruntime's on the same shape.
 *
 *   gcc -O2 -mavx2 -fopenmp benchmarks/row_copy_bound.c -o /tmp/row_copy_bound
 *   OMP_NUM_THREADS=2 /tmp/row_copy_bound     # and OMP_NUM_THREADS=1
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { ROWS = 50000, WIDTH = 512, IDS = 8192, REPS = 31 };

static float *table, *out;
static int ids[IDS];

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static const float *row(int k) { return table + (size_t)ids[k] * WIDTH; }
static float *dest(int k) { return out + (size_t)k * WIDTH; }

static void by_memcpy(void) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < IDS; k++) memcpy(dest(k), row(k), WIDTH * sizeof(float));
}

static void by_vectors(void) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < IDS; k++)
        for (int j = 0; j < WIDTH; j += 8) _mm256_storeu_ps(dest(k) + j, _mm256_loadu_ps(row(k) + j));
}

static void by_vectors_prefetching(void) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < IDS; k++) {
        if (k + 2 < IDS)
            for (int b = 0; b < WIDTH * 4; b += 64) _mm_prefetch((const char *)row(k + 2) + b, _MM_HINT_T0);
        for (int j = 0; j < WIDTH; j += 8) _mm256_storeu_ps(dest(k) + j, _mm256_loadu_ps(row(k) + j));
    }
}

static void by_streaming_stores(void) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < IDS; k++)
        for (int j = 0; j < WIDTH; j += 8) _mm256_stream_ps(dest(k) + j, _mm256_loadu_ps(row(k) + j));
    _mm_sfence();
}

static void by_rep_movsb(void) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < IDS; k++) {
        void *d = dest(k);
        const void *s = row(k);
        size_t n = WIDTH * sizeof(float);
        __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    size_t table_bytes = (size_t)ROWS * WIDTH * sizeof(float), out_bytes = (size_t)IDS * WIDTH * sizeof(float);
    table = aligned_alloc(2 << 20, table_bytes);
    out = aligned_alloc(2 << 20, out_bytes);
    madvise(table, table_bytes, MADV_HUGEPAGE);  /* as numpy does for large arrays */
    madvise(out, out_bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < (size_t)ROWS * WIDTH; i++) table[i] = (float)i;
    memset(out, 0, out_bytes);
    srand(1);
    for (int k = 0; k < IDS; k++) ids[k] = rand() % ROWS;

    void (*copies[])(void) = {by_memcpy, by_vectors, by_vectors_prefetching, by_streaming_stores, by_rep_movsb};
    const char *names[] = {"memcpy per row", "256-bit loop (XLA's)", "256-bit loop + prefetch",
                           "non-temporal stores", "rep movsb"};
    for (int round = 0; round < 3; round++) {
        for (int c = 0; c < 5; c++) {
            double times[REPS];
            copies[c]();
            for (int r = 0; r < REPS; r++) {
                double start = seconds();
                copies[c]();
                times[r] = seconds() - start;
            }
            qsort(times, REPS, sizeof(double), by_value);
            printf("%d threads  %-26s %.3f ms\n", omp_get_max_threads(), names[c], times[REPS / 2] * 1e3);
        }
    }
    return 0;
}
