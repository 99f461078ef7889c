/* common/fileio.h: durable writes (temp name, fsync, rename, fsync dir; DESIGN.md §4),
 * whole-file reads, read-only mmap, directories. */
#ifndef GLM_FILEIO_H
#define GLM_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "status.h"

/* An output file that appears under its final name only when committed. Writes go to
 * "<path>.tmp.<pid>" in the same directory; glm_afile_commit() flushes, fsyncs, renames it
 * over `path` and fsyncs the directory; glm_afile_abort() (or a crash) leaves the previous
 * file at `path` untouched. */
typedef struct glm_afile {
    FILE *f;          /* write through this (fwrite/fprintf) or glm_afile_write */
    char *path;       /* final name */
    char *tmp;        /* temporary name */
    bool failed;      /* a write failed: commit will refuse */
} glm_afile;

glm_status glm_afile_open(glm_afile *af, const char *path);
glm_status glm_afile_write(glm_afile *af, const void *data, size_t n);
glm_status glm_afile_commit(glm_afile *af);   /* closes; frees af's strings */
void glm_afile_abort(glm_afile *af);          /* closes, removes the temp file */

/* Writes `n` bytes to `path` atomically (glm_afile in one call). */
glm_status glm_write_file_atomic(const char *path, const void *data, size_t n);

/* fsync of a directory, so that a rename inside it is durable. */
glm_status glm_fsync_dir(const char *dir);

/* Renames directory `tmpdir` to `dir` after fsyncing every regular file in it, then fsyncs the
 * parent. If `dir` exists it is first moved aside and removed after the rename. */
glm_status glm_commit_dir(const char *tmpdir, const char *dir);

/* Reads a whole file into a malloc'd, NUL-terminated buffer (*len excludes the NUL). */
glm_status glm_read_file(const char *path, char **data, size_t *len);

/* Read-only mapping of a whole file. An empty file maps to data=NULL, size 0. */
typedef struct glm_mmap {
    void *data;
    size_t size;
} glm_mmap;
glm_status glm_mmap_open(glm_mmap *m, const char *path);
void glm_mmap_close(glm_mmap *m);

/* mkdir -p. */
glm_status glm_mkdir_p(const char *path);
/* rm -rf of a directory tree (used for temp and pruned checkpoint dirs). Symbolic links are
 * removed, never followed. */
glm_status glm_rmtree(const char *path);
bool glm_is_dir(const char *path);
bool glm_is_file(const char *path);
/* "<a>/<b>" in a malloc'd string. */
char *glm_path_join(const char *a, const char *b);

#endif
