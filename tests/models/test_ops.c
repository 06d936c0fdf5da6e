/* ms_rows_parallel (models/ops.h): every element of rows x cols is handed
 * out exactly once, in pieces of at most MS_SPAN_COLS columns of one row,
 * on one thread and on several, for shapes under and over the inline bound
 * and with ragged last pieces. */
#include <stdatomic.h>

#include "base/pool.h"
#include "models/ops.h"
#include "test.h"

typedef struct cover {
    int64_t rows, cols;
    _Atomic int *hits;
    _Atomic int bad;
} cover;

static void cover_span(void *ctx, int64_t r, int64_t c0, int64_t c1)
{
    cover *c = ctx;
    if (r < 0 || r >= c->rows || c0 < 0 || c1 > c->cols || c0 >= c1 || c1 - c0 > MS_SPAN_COLS) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    for (int64_t i = c0; i < c1; i++)
        atomic_fetch_add(&c->hits[r * c->cols + i], 1);
}

static void test_rows_parallel_covers_once(void)
{
    const int64_t shapes[][2] = {{1, 1},    {3, 100},  {1, 2047}, {2, 1024}, {2, 1025},
                                 {7, 3000}, {4, 2880}, {64, 33}, {1, 5000}};
    for (int threads = 1; threads <= 2; threads++) {
        CHECK(ms_pool_set_threads(threads) == 0, "%d threads", threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            cover c = {shapes[s][0], shapes[s][1], NULL, 0};
            c.hits = calloc((size_t)(c.rows * c.cols), sizeof *c.hits);
            ms_rows_parallel(c.rows, c.cols, cover_span, &c);
            int64_t wrong = 0;
            for (int64_t i = 0; i < c.rows * c.cols; i++)
                wrong += atomic_load(&c.hits[i]) != 1;
            CHECK(wrong == 0 && atomic_load(&c.bad) == 0,
                  "%d threads, %lld x %lld: %lld elements not covered once, %d bad pieces",
                  threads, (long long)c.rows, (long long)c.cols, (long long)wrong,
                  atomic_load(&c.bad));
            free(c.hits);
        }
    }
    ms_rows_parallel(0, 10, cover_span, NULL); /* nothing to do: fn never called */
    ms_rows_parallel(10, 0, cover_span, NULL);
}

int main(void)
{
    TEST_CASE(test_rows_parallel_covers_once);
    return t_finish();
}
