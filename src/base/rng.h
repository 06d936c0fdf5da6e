/* A small seeded random generator (xoshiro256**, seeded by splitmix64):
 * deterministic for a seed, state owned by its user (the sampler, synth). */
#ifndef MS_BASE_RNG_H
#define MS_BASE_RNG_H

#include <stdint.h>

typedef struct ms_rng {
    uint64_t s[4];
} ms_rng;

static inline void ms_rng_seed(ms_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r->s[i] = z ^ (z >> 31);
    }
}

static inline uint64_t ms_rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t ms_rng_next(ms_rng *r)
{
    uint64_t *s = r->s, v = ms_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = ms_rng_rotl(s[3], 45);
    return v;
}

#endif
