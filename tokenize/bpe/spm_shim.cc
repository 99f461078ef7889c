// tokenize/bpe/spm_shim.cc: the C shim over sentencepiece::SentencePieceProcessor (see spm_shim.h).
#include "tokenize/bpe/spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct glm_spm {
    sentencepiece::SentencePieceProcessor sp;
};

static void set_err(char *err, size_t errlen, const std::string &msg) {
    if (err && errlen) std::snprintf(err, errlen, "%s", msg.c_str());
}

extern "C" glm_spm *glm_spm_load(const void *data, size_t len, char *err, size_t errlen) {
    try {
        glm_spm *m = new glm_spm();
        auto st = m->sp.LoadFromSerializedProto(
            absl::string_view(static_cast<const char *>(data), len));
        if (!st.ok()) {
            set_err(err, errlen, st.ToString());
            delete m;
            return nullptr;
        }
        return m;
    } catch (const std::exception &e) {
        set_err(err, errlen, e.what());
        return nullptr;
    }
}

extern "C" void glm_spm_free(glm_spm *m) { delete m; }

extern "C" uint32_t glm_spm_size(const glm_spm *m) {
    return static_cast<uint32_t>(m->sp.GetPieceSize());
}

extern "C" int glm_spm_encode(const glm_spm *m, const char *text, size_t len, uint32_t **ids,
                              size_t *n, char *err, size_t errlen) {
    try {
        std::vector<int> v;
        auto st = m->sp.Encode(absl::string_view(text, len), &v);
        if (!st.ok()) {
            set_err(err, errlen, st.ToString());
            return -1;
        }
        uint32_t *out = static_cast<uint32_t *>(std::malloc((v.size() ? v.size() : 1) * sizeof(uint32_t)));
        if (!out) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < v.size(); i++) out[i] = static_cast<uint32_t>(v[i]);
        *ids = out;
        *n = v.size();
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, e.what());
        return -1;
    }
}

extern "C" char *glm_spm_decode(const glm_spm *m, const uint32_t *ids, size_t n, size_t *len,
                                char *err, size_t errlen) {
    try {
        std::vector<int> v(n);
        int size = m->sp.GetPieceSize();
        for (size_t i = 0; i < n; i++) {
            if (ids[i] >= static_cast<uint32_t>(size)) {
                set_err(err, errlen, "id " + std::to_string(ids[i]) + " out of range");
                return nullptr;
            }
            v[i] = static_cast<int>(ids[i]);
        }
        std::string s;
        auto st = m->sp.Decode(v, &s);
        if (!st.ok()) {
            set_err(err, errlen, st.ToString());
            return nullptr;
        }
        char *out = static_cast<char *>(std::malloc(s.size() + 1));
        if (!out) {
            set_err(err, errlen, "out of memory");
            return nullptr;
        }
        std::memcpy(out, s.data(), s.size());
        out[s.size()] = 0;
        *len = s.size();
        return out;
    } catch (const std::exception &e) {
        set_err(err, errlen, e.what());
        return nullptr;
    }
}

extern "C" const char *glm_spm_id_to_piece(const glm_spm *m, uint32_t id, size_t *len) {
    if (id >= static_cast<uint32_t>(m->sp.GetPieceSize())) return nullptr;
    const std::string &p = m->sp.IdToPiece(static_cast<int>(id));
    if (len) *len = p.size();
    return p.c_str();
}

extern "C" int64_t glm_spm_piece_to_id(const glm_spm *m, const char *piece, size_t len) {
    int id = m->sp.PieceToId(absl::string_view(piece, len));
    if (id < 0 || id >= m->sp.GetPieceSize()) return -1;
    const std::string &p = m->sp.IdToPiece(id);
    if (p.size() != len || std::memcmp(p.data(), piece, len) != 0) return -1; // the unk fallback
    return id;
}

extern "C" int glm_spm_piece_type(const glm_spm *m, uint32_t id) {
    if (id >= static_cast<uint32_t>(m->sp.GetPieceSize())) return 0;
    int i = static_cast<int>(id);
    if (m->sp.IsUnknown(i)) return GLM_SPM_UNKNOWN;
    if (m->sp.IsControl(i)) return GLM_SPM_CONTROL;
    if (m->sp.IsUnused(i)) return GLM_SPM_UNUSED;
    if (m->sp.IsByte(i)) return GLM_SPM_BYTE;
    return GLM_SPM_NORMAL;
}
