/* One-pass CPU page copy for hicache.kernels (plain C: no torch headers, so it compiles in
 * well under a second; kernels/native.py builds and loads it with ctypes).
 *
 * A call copies, for every position i of a page list, the rows of source page src_pages[i]
 * to destination page dst_pages[i]. The copy is a nest of at most MAX_DIMS loops (e.g.
 * component, layer, token; outermost first), each with a source and a destination stride,
 * around one copy of `run` bytes; the loop over the page list sits between loop
 * page_depth - 1 and loop page_depth (page_depth = 0: outermost). Loops outside it walk
 * separate regions (a layer_first pool's components and layers), so each region's pages are
 * written one after the other; loops inside it walk within one page. The caller has already
 * merged every loop whose strides make the runs adjacent on both sides (a whole page chunk
 * becomes one run) and has validated the plan: indices in range, destination pages
 * duplicate-free, source and destination bytes disjoint. Nothing here re-checks that; all
 * offsets are bytes, in int64 (layer * layer-stride exceeds 32 bits on real pools).
 *
 * A NULL page list means the identity (position i is page i): the contiguous scratch side of
 * a gather or scatter. With nthreads > 1 the page list is split into nthreads contiguous
 * ranges; since destination pages are distinct, the threads write disjoint bytes.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define ABI_VERSION 4
#define MAX_DIMS 3
#define MAX_THREADS 64
/* Runs of at least this many bytes go to memcpy; shorter ones (token rows) to an inline loop
 * of 16-byte vectors, 64 bytes a step: at 1-2 KiB glibc's memcpy (call, size dispatch) ran at
 * 0.5 of a contiguous copy, the inline loop at 0.9; from 16 KiB memcpy is the faster. */
#define MEMCPY_MIN_BYTES 16384
/* Software prefetch (see prefetch_within_page): PREFETCH_PAGES_AHEAD pages ahead in the list,
 * at every PREFETCH_STEP bytes of each run, for pages of at most PREFETCH_MAX such points. */
#define PREFETCH_STEP 4096
#define PREFETCH_PAGES_AHEAD 2
#define PREFETCH_MAX 64

typedef struct {
    const char *src;
    char *dst;
    const int64_t *src_pages;
    const int64_t *dst_pages;
    int64_t src_page_stride;
    int64_t dst_page_stride;
    int ndims;
    int page_depth;
    int64_t count[MAX_DIMS];
    int64_t src_stride[MAX_DIMS];
    int64_t dst_stride[MAX_DIMS];
    int64_t run;
    int prefetch; /* pages are few runs: prefetch them ahead */
    int64_t begin; /* page-list positions [begin, end) */
    int64_t end;
} Job;

int hicache_pagecopy_abi(void) { return ABI_VERSION; }

static inline void copy_run(char *d, const char *s, int64_t n) {
#if defined(__SSE2__)
    if (n < MEMCPY_MIN_BYTES) {
        int64_t i = 0;
        for (; i + 64 <= n; i += 64) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
            const __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
            const __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
            _mm_storeu_si128((__m128i *)(d + i), a);
            _mm_storeu_si128((__m128i *)(d + i + 16), b);
            _mm_storeu_si128((__m128i *)(d + i + 32), c);
            _mm_storeu_si128((__m128i *)(d + i + 48), e);
        }
        if (i < n)
            memcpy(d + i, s + i, (size_t)(n - i));
        return;
    }
#endif
    memcpy(d, s, (size_t)n);
}

/* The loops from `dim` inward, around the run copy, for one page pair. */
static void copy_within_page(const Job *job, const char *s, char *d, int dim) {
    if (dim == job->ndims) {
        copy_run(d, s, job->run);
        return;
    }
    const int64_t n = job->count[dim], ss = job->src_stride[dim], ds = job->dst_stride[dim];
    if (dim + 1 == job->ndims) { /* innermost loop: no call per run */
        for (int64_t k = 0; k < n; ++k)
            copy_run(d + k * ds, s + k * ss, job->run);
        return;
    }
    for (int64_t k = 0; k < n; ++k)
        copy_within_page(job, s + k * ss, d + k * ds, dim + 1);
}

/* Random pages defeat the hardware prefetcher at every page start. Touching a page some pages
 * ahead in the list, once per 4 KiB memory page of each run (two lines of the source), hides
 * those first DRAM and TLB misses: measured +0.1-0.15 of a contiguous copy on 16 KiB pages.
 * Pages made of many short runs are left to the hardware, which follows each run. */
static void prefetch_within_page(const Job *job, const char *s, char *d, int dim) {
    if (dim == job->ndims) {
        for (int64_t o = 0; o < job->run; o += PREFETCH_STEP) {
            __builtin_prefetch(s + o, 0, 3);
            if (o + 64 < job->run)
                __builtin_prefetch(s + o + 64, 0, 3);
            __builtin_prefetch(d + o, 1, 3);
        }
        return;
    }
    for (int64_t k = 0; k < job->count[dim]; ++k)
        prefetch_within_page(job, s + k * job->src_stride[dim], d + k * job->dst_stride[dim], dim + 1);
}

/* The loops outside the page loop, then the page loop over [begin, end). */
static void copy_regions(const Job *job, const char *s, char *d, int dim) {
    if (dim == job->page_depth) {
        for (int64_t i = job->begin; i < job->end; ++i) {
            const int64_t sp = job->src_pages ? job->src_pages[i] : i;
            const int64_t dp = job->dst_pages ? job->dst_pages[i] : i;
            const int64_t ahead = i + PREFETCH_PAGES_AHEAD;
            if (job->prefetch && ahead < job->end) {
                const int64_t nsp = job->src_pages ? job->src_pages[ahead] : ahead;
                const int64_t ndp = job->dst_pages ? job->dst_pages[ahead] : ahead;
                prefetch_within_page(job, s + nsp * job->src_page_stride, d + ndp * job->dst_page_stride, dim);
            }
            copy_within_page(job, s + sp * job->src_page_stride, d + dp * job->dst_page_stride, dim);
        }
        return;
    }
    const int64_t n = job->count[dim], ss = job->src_stride[dim], ds = job->dst_stride[dim];
    for (int64_t k = 0; k < n; ++k)
        copy_regions(job, s + k * ss, d + k * ds, dim + 1);
}

static void *run_job(void *arg) {
    const Job *job = (const Job *)arg;
    copy_regions(job, job->src, job->dst, 0);
    return NULL;
}

/* dims: ndims rows of (count, src_stride, dst_stride), outermost first; the page loop sits
 * at depth page_depth (0..ndims). Returns 0, or a negative code for arguments the caller
 * should never pass (nothing has been copied then). */
int hicache_copy_pages(const char *src, char *dst, int64_t n, const int64_t *src_pages,
                       const int64_t *dst_pages, int64_t src_page_stride, int64_t dst_page_stride,
                       int ndims, int page_depth, const int64_t *dims, int64_t run, int nthreads) {
    if (ndims < 0 || ndims > MAX_DIMS || page_depth < 0 || page_depth > ndims || run < 0 || n < 0)
        return -1;
    Job base;
    base.src = src;
    base.dst = dst;
    base.src_pages = src_pages;
    base.dst_pages = dst_pages;
    base.src_page_stride = src_page_stride;
    base.dst_page_stride = dst_page_stride;
    base.ndims = ndims;
    base.page_depth = page_depth;
    for (int k = 0; k < ndims; ++k) {
        base.count[k] = dims[3 * k];
        base.src_stride[k] = dims[3 * k + 1];
        base.dst_stride[k] = dims[3 * k + 2];
    }
    base.run = run;
    int64_t points = (run + PREFETCH_STEP - 1) / PREFETCH_STEP;
    for (int k = page_depth; k < ndims && points <= PREFETCH_MAX; ++k)
        points *= base.count[k];
    base.prefetch = points <= PREFETCH_MAX;
    if (n == 0 || run == 0)
        return 0;
    if (nthreads > n)
        nthreads = (int)n;
    if (nthreads > MAX_THREADS)
        nthreads = MAX_THREADS;
    if (nthreads < 1)
        nthreads = 1;
    Job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS];
    for (int t = 0; t < nthreads; ++t) {
        jobs[t] = base;
        jobs[t].begin = n * t / nthreads;
        jobs[t].end = n * (t + 1) / nthreads;
        started[t] = 0;
    }
    /* Job 0 runs on the calling thread; a thread that cannot be started runs here too. */
    for (int t = 1; t < nthreads; ++t)
        started[t] = pthread_create(&tids[t], NULL, run_job, &jobs[t]) == 0;
    run_job(&jobs[0]);
    for (int t = 1; t < nthreads; ++t) {
        if (started[t])
            pthread_join(tids[t], NULL);
        else
            run_job(&jobs[t]);
    }
    return 0;
}

/* Validate a page index list before any launch (the host-side half of every copy, Triton's
 * included): every index in [0, limit), and with `seen` non-NULL (a zeroed bitmap of limit
 * bits) no index twice. One pass; returns -1 when the list is valid, else the position of
 * the first bad index with *why = 1 (out of range) or 2 (repeated). On a GPU this check was
 * most of a scatter's time through torch (min, max, then a bincount over the pool). */
int64_t hicache_check_pages(const int64_t *ids, int64_t n, int64_t limit, uint8_t *seen, int *why) {
    for (int64_t i = 0; i < n; i++) {
        int64_t p = ids[i];
        if (p < 0 || p >= limit) {
            *why = 1;
            return i;
        }
        if (seen) {
            uint8_t bit = (uint8_t)(1u << (p & 7));
            if (seen[p >> 3] & bit) {
                *why = 2;
                return i;
            }
            seen[p >> 3] |= bit;
        }
    }
    *why = 0;
    return -1;
}
