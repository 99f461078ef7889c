/* tests/json_same.h: whether two jansson values are the same in every respect (types, key order,
 * string bytes, integer values, the bits of every double): json_equal ignores key order and
 * compares doubles by value. For the tests and fuzz targets that hold the fast JSON path
 * (common/jsonfast.h) to jansson. */
#ifndef GLM_TESTS_JSON_SAME_H
#define GLM_TESTS_JSON_SAME_H
#include <jansson.h>
#include <string.h>

static int json_same(json_t *a, json_t *b) {
    if (json_typeof(a) != json_typeof(b)) return 0;
    switch (json_typeof(a)) {
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b)) return 0;
        void *ia = json_object_iter(a), *ib = json_object_iter(b);
        for (; ia && ib; ia = json_object_iter_next(a, ia), ib = json_object_iter_next(b, ib)) {
            size_t ka = json_object_iter_key_len(ia), kb = json_object_iter_key_len(ib);
            if (ka != kb || memcmp(json_object_iter_key(ia), json_object_iter_key(ib), ka)) return 0;
            if (!json_same(json_object_iter_value(ia), json_object_iter_value(ib))) return 0;
        }
        return !ia && !ib;
    }
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_same(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    case JSON_INTEGER: return json_integer_value(a) == json_integer_value(b);
    case JSON_REAL: {
        double x = json_real_value(a), y = json_real_value(b);
        return !memcmp(&x, &y, sizeof x);
    }
    default: return 1;
    }
}

#endif
