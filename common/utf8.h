/* common/utf8.h: strict UTF-8 validation (RFC 3629): no overlong forms, no surrogates
 * U+D800..DFFF, nothing above U+10FFFF, no truncated sequences. */
#ifndef GLM_UTF8_H
#define GLM_UTF8_H

#include <stddef.h>

/* Returns len when s[0..len) is valid UTF-8, else the byte offset of the first invalid
 * sequence. ASCII runs are checked 8 bytes at a time. */
size_t glm_utf8_check(const char *s, size_t len);

/* A malloc'd, NUL-terminated copy of the C string s in which every invalid UTF-8 sequence is
 * replaced by U+FFFD, so that it can go into JSON (file names are bytes, JSON text is UTF-8).
 * NULL when out of memory. */
char *glm_utf8_lossy(const char *s);

#endif
