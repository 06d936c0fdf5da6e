/* Synthetic FP8 codes (ms_synth_e4m3) are spread as a trained checkpoint's:
 * no NaN code, the extremes at +-448 (what the block scale maps the largest
 * |w| to), a quantile (values never decrease with u) symmetric about zero,
 * and subnormals about as rare as in the FP8 fixtures (0.009-0.01% there,
 * quantised by the upstream code): benchmarks over these codes time the
 * case real weights have, not one in sixteen codes subnormal, which Intel
 * cores multiply through microcode assists. Values are decoded by the
 * scalar reference decoder (format/dtype.c). */
#include "test.h"
#include "format/dtype.h"
#include "runtime/synth.h"

static void test_codes_are_a_symmetric_quantile(void)
{
    int nan = 0, order = 0, mirror = 0;
    for (int u = 0; u < 1 << 16; u++) {
        uint8_t c = ms_synth_e4m3((uint16_t)u);
        nan += (c & 0x7F) == 0x7F;
        if (u > 0 && ms_e4m3_to_f32(c) < ms_e4m3_to_f32(ms_synth_e4m3((uint16_t)(u - 1))))
            order++;
        if (ms_e4m3_to_f32(c) != -ms_e4m3_to_f32(ms_synth_e4m3((uint16_t)(65535 - u))))
            mirror++;
    }
    CHECK(nan == 0, "%d NaN codes", nan);
    CHECK(order == 0, "%d codes below the one before", order);
    CHECK(mirror == 0, "%d codes not the negation of their mirror", mirror);
    CHECK(ms_e4m3_to_f32(ms_synth_e4m3(0)) == -448.0f, "lowest %g",
          ms_e4m3_to_f32(ms_synth_e4m3(0)));
    CHECK(ms_e4m3_to_f32(ms_synth_e4m3(65535)) == 448.0f, "highest %g",
          ms_e4m3_to_f32(ms_synth_e4m3(65535)));
}

static void test_subnormals_rare_as_in_trained_weights(void)
{
    int sub = 0, big = 0;
    for (int u = 0; u < 1 << 16; u++) {
        uint8_t c = ms_synth_e4m3((uint16_t)u);
        sub += (c & 0x78) == 0 && (c & 7) != 0;
        big += fabsf(ms_e4m3_to_f32(c)) >= 64.0f;
    }
    double pct = 100.0 * sub / 65536.0;
    printf("     subnormal codes: %d of 65536 (%.4f%%); |w| >= 64: %.1f%%\n", sub, pct,
           100.0 * big / 65536.0);
    CHECK(pct >= 0.005 && pct <= 0.1, "%.4f%% subnormal, want 0.005-0.1%%", pct);
    /* not a spike at zero: the bulk of the codes use the upper exponents */
    CHECK(big > 65536 / 10 && big < 65536 / 2, "%d codes at |w| >= 64", big);
}

int main(void)
{
    TEST_CASE(test_codes_are_a_symmetric_quantile);
    TEST_CASE(test_subnormals_rare_as_in_trained_weights);
    return t_finish();
}
