/* common/hash.h: checksums and fingerprints.
 * - glm_crc32: the zlib / IEEE 802.3 CRC-32 (zlib's crc32()), for shard and checkpoint payloads.
 * - glm_crc32c: CRC-32C (Castagnoli), as TFRecord (TensorBoard event files) requires, and its
 *   "masked" form ((crc >> 15 | crc << 17) + 0xa282ead8) from TensorFlow's record_writer.
 * - glm_fnv1a64: FNV-1a 64-bit, for tokenizer fingerprints (streamed with a running value). */
#ifndef GLM_HASH_H
#define GLM_HASH_H

#include <stddef.h>
#include <stdint.h>

uint32_t glm_crc32(uint32_t crc, const void *data, size_t n);
uint32_t glm_crc32c(uint32_t crc, const void *data, size_t n);
uint32_t glm_crc32c_masked(const void *data, size_t n);
#define GLM_FNV1A64_INIT 0xcbf29ce484222325ULL
uint64_t glm_fnv1a64(uint64_t h, const void *data, size_t n);

#endif
