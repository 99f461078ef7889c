/* tests/cli/tb_dump.c: prints a TensorBoard event file record by record, for the CLI tests.
 * Reads the TFRecord framing (u64 length, masked CRC-32C of the length, data, masked CRC-32C of
 * the data; both CRCs checked) and the Event protobuf fields of tensorflow/core/util/event.proto:
 * wall_time 1, step 2, file_version 3, summary 5 (Summary.value 1: Value.tag 1, simple_value 2),
 * session_log 7 (SessionLog.status 1: START 1). One line per record:
 *   version <file_version>
 *   scalar <step> <tag> <value, %.9g>
 *   session <step> <status>
 * Exit 1 (with a message) on a bad CRC, a truncated record or a malformed protobuf. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/hash.h"

static int bad(const char *what, long off) {
    fprintf(stderr, "tb_dump: %s at offset %ld\n", what, off);
    return 1;
}

static int varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int sh = 0; sh < 64 && *p < end; sh += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tb_dump EVENTFILE\n");
        return 2;
    }
    char *data;
    size_t n;
    if (glm_read_file(argv[1], &data, &n) != GLM_OK) {
        fprintf(stderr, "tb_dump: %s\n", glm_errmsg());
        return 1;
    }
    const unsigned char *p = (const unsigned char *)data, *end = p + n;
    while (p < end) {
        long off = (long)(p - (const unsigned char *)data);
        if (end - p < 12) return bad("truncated record header", off);
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)p[i] << (8 * i);
        uint32_t lc = 0, dc = 0;
        for (int i = 0; i < 4; i++) lc |= (uint32_t)p[8 + i] << (8 * i);
        if (glm_crc32c_masked(p, 8) != lc) return bad("bad length CRC", off);
        if ((uint64_t)(end - p - 12) < len + 4) return bad("truncated record", off);
        const unsigned char *ev = p + 12, *eend = ev + len;
        for (int i = 0; i < 4; i++) dc |= (uint32_t)eend[i] << (8 * i);
        if (glm_crc32c_masked(ev, (size_t)len) != dc) return bad("bad data CRC", off);
        int64_t step = 0;
        char version[64] = "", tag[256] = "";
        float value = 0;
        int has_value = 0, has_session = 0;
        uint64_t status = 0;
        while (ev < eend) {
            uint64_t key, v;
            if (varint(&ev, eend, &key)) return bad("bad field key", off);
            int field = (int)(key >> 3), wt = (int)(key & 7);
            if (wt == 0) {
                if (varint(&ev, eend, &v)) return bad("bad varint", off);
                if (field == 2) step = (int64_t)v;
            } else if (wt == 1) {
                if (eend - ev < 8) return bad("short double", off);
                ev += 8;
            } else if (wt == 5) {
                if (eend - ev < 4) return bad("short float", off);
                ev += 4;
            } else if (wt == 2) {
                if (varint(&ev, eend, &v) || (uint64_t)(eend - ev) < v) return bad("bad length", off);
                const unsigned char *q = ev, *qend = ev + v;
                if (field == 3) snprintf(version, sizeof version, "%.*s", (int)v, (const char *)q);
                if (field == 5) { /* Summary { repeated Value value = 1 } */
                    while (q < qend) {
                        uint64_t k2, l2;
                        if (varint(&q, qend, &k2) || k2 != (1 << 3 | 2) || varint(&q, qend, &l2) ||
                            (uint64_t)(qend - q) < l2)
                            return bad("bad Summary", off);
                        const unsigned char *r = q, *rend = q + l2;
                        while (r < rend) {
                            uint64_t k3, l3;
                            if (varint(&r, rend, &k3)) return bad("bad Value", off);
                            if (k3 == (1 << 3 | 2)) {
                                if (varint(&r, rend, &l3) || (uint64_t)(rend - r) < l3) return bad("bad tag", off);
                                snprintf(tag, sizeof tag, "%.*s", (int)l3, (const char *)r);
                                r += l3;
                            } else if (k3 == (2 << 3 | 5)) {
                                if (rend - r < 4) return bad("bad simple_value", off);
                                memcpy(&value, r, 4);
                                r += 4;
                                has_value = 1;
                            } else {
                                return bad("unexpected Value field", off);
                            }
                        }
                        q = rend;
                    }
                }
                if (field == 7) { /* SessionLog { status = 1 } */
                    has_session = 1;
                    while (q < qend) {
                        uint64_t k2, v2;
                        if (varint(&q, qend, &k2)) return bad("bad SessionLog", off);
                        if ((k2 & 7) == 0) {
                            if (varint(&q, qend, &v2)) return bad("bad SessionLog", off);
                            if (k2 >> 3 == 1) status = v2;
                        } else if ((k2 & 7) == 2) {
                            if (varint(&q, qend, &v2) || (uint64_t)(qend - q) < v2) return bad("bad SessionLog", off);
                            q += v2;
                        } else {
                            return bad("bad SessionLog", off);
                        }
                    }
                }
                ev = qend;
            } else {
                return bad("unknown wire type", off);
            }
        }
        if (version[0]) printf("version %s\n", version);
        if (has_value) printf("scalar %lld %s %.9g\n", (long long)step, tag, value);
        if (has_session) printf("session %lld %llu\n", (long long)step, (unsigned long long)status);
        p = eend + 4;
    }
    free(data);
    return 0;
}
