/* hash: splitmix64's output function, the one 64-bit mixer of the project: the random batch
 * windows (tokens.h) and the checkpoint checksums (train/ckpt) both use it. Pure; depends on
 * nothing. */
#ifndef MT_DATA_HASH_H
#define MT_DATA_HASH_H
#include <stdint.h>

/* Not collective. z += 0x9e3779b97f4a7c15; z = (z ^ (z >> 30)) · 0xbf58476d1ce4e5b9;
 * z = (z ^ (z >> 27)) · 0x94d049bb133111eb; returns z ^ (z >> 31) (uint64, wrapping). */
uint64_t hash_mix64(uint64_t z);
#endif
