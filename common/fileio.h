/* common/fileio.h: durable writes (temp name, fsync, rename, fsync dir; docs/design.md §4),
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
 * file at `path` untouched.
 * Outputs that are not regular files are never replaced by one:
 *   - a symbolic link is followed (to its final target, relative links against their own
 *     directory, a dangling one creates its target): the target is replaced atomically, the
 *     link stays;
 *   - a FIFO, a character or block device (e.g. /dev/null, /dev/full), or an open descriptor
 *     named through /dev/stdout, /dev/fd/N or /proc/<pid>/fd/N is written through: opened for
 *     writing (O_APPEND, so a redirected stdout is not overwritten from offset 0), flushed and
 *     closed at commit; write errors (ENOSPC from /dev/full) fail the commit; abort cannot take
 *     back what was written;
 *   - a directory is an error. */
typedef struct glm_afile {
    FILE *f;          /* write through this (fwrite/fprintf) or glm_afile_write */
    char *path;       /* final name (after following symbolic links) */
    char *tmp;        /* temporary name; NULL when written through */
    bool failed;      /* a write failed: commit will refuse */
    bool through;     /* written through (device, FIFO, open descriptor), not renamed */
    bool existed;     /* a file of that name was there at open (a failed write leaves it as it was) */
} glm_afile;

/* Opens an output (see glm_afile). Errors: GLM_ERR_IO naming the path (cannot create or open,
 * is a directory, a symbolic link loop), GLM_ERR_NOMEM. */
glm_status glm_afile_open(glm_afile *af, const char *path);
/* Writes n bytes. Errors: GLM_ERR_IO naming the file, the system's reason and what the failure
 * leaves: for a full disk (ENOSPC) "the disk is full", and either that the earlier file of that
 * name is left as it was or, for a new file, that it was not created; a hint to free space. */
glm_status glm_afile_write(glm_afile *af, const void *data, size_t n);
/* Flushes, fsyncs and puts the file in place; errors as glm_afile_write's (a full disk often shows
 * only here, when the buffered data is flushed). */
glm_status glm_afile_commit(glm_afile *af);   /* closes; frees af's strings */
void glm_afile_abort(glm_afile *af);          /* closes, removes the temp file */

/* Writes `n` bytes to `path` atomically (glm_afile in one call; devices, FIFOs and
 * /dev/stdout are written through). */
glm_status glm_write_file_atomic(const char *path, const void *data, size_t n);

/* How an output path is written: *target (malloc'd) is the path after following symbolic
 * links; *through is true for a FIFO, a device or an open descriptor (/dev/stdout, /dev/fd/N,
 * /proc/<pid>/fd/N). A path that does not exist yet resolves to itself (or to a dangling
 * link's target). Errors: GLM_ERR_IO (a directory, a link loop, lstat failure). */
glm_status glm_output_target(const char *path, char **target, bool *through);

/* An output directory's real location: a symbolic link is followed to its final target (a
 * dangling one to the name it points at, relative links against their own directory); any
 * other path is returned as it is (malloc'd). Writers resolve their output directory first, so
 * that the temp directory beside it is on the target's filesystem. Errors: GLM_ERR_IO. */
glm_status glm_output_target_dir(const char *path, char **target);

/* Takes an exclusive flock(2) on directory `dir`, kept on *fd (opened close-on-exec) until the
 * caller closes it, so that a second run writing the same output stops before it touches the
 * first one's files. The lock is on the directory `dir` names once the lock is held (a directory
 * replaced as a whole meanwhile, as a finished tokenize replaces its output, is opened again).
 * Does nothing when *fd >= 0 (already held) or when `dir` does not exist (the caller locks it
 * once made); a filesystem without locks only gets a warning. holder ("glmtune train") and opt
 * ("--output-dir") name the other run and the option in the message. Errors: GLM_ERR_ARG (held
 * by another process: "<dir> is in use by another <holder>", with a hint), GLM_ERR_IO (cannot
 * open the directory). */
glm_status glm_lock_dir(const char *dir, const char *holder, const char *opt, int *fd);

/* fsync of a directory, so that a rename inside it is durable. */
glm_status glm_fsync_dir(const char *dir);

/* Puts directory `tmpdir` under the name `dir` after fsyncing every regular file in it, then
 * fsyncs the parent. When `dir` exists, the two are swapped in one atomic
 * renameat2(RENAME_EXCHANGE) and the old content (now at `tmpdir`) is removed, so a kill at any
 * moment leaves the old or the new complete directory under `dir`. On a filesystem without
 * RENAME_EXCHANGE, `dir` is first renamed to "<dir>.old.<pid>" (a kill between the two renames
 * leaves no `dir`; glm_cleanup_leftovers restores it). A symbolic link `dir` is followed: its
 * target is replaced. `tmpdir` must be on the target's filesystem. */
glm_status glm_commit_dir(const char *tmpdir, const char *dir);

/* Cleans what killed runs left beside the output `path`: "<path>.tmp.<pid>" and
 * "<path>.old.<pid>" whose process is gone (or is this process, from an earlier life of its
 * pid). An ".old" copy is restored to `path` when `path` itself is missing (a kill between the
 * two renames of the fallback swap), otherwise removed. Each action is logged. */
void glm_cleanup_leftovers(const char *path);

/* An output directory replaced as a whole (glm_commit_dir) deletes whatever it held: writers call
 * this first to find an entry they would not write themselves. *first (malloc'd) is the first
 * entry of `dir`, in byte order of the names, that ours(dir, name, arg) does not accept (every
 * entry but "." and "..", hidden ones too), or NULL when ours accepts them all or `dir` does
 * not exist. Errors: GLM_ERR_IO naming dir when it cannot be listed, GLM_ERR_NOMEM. */
glm_status glm_dir_first_foreign(const char *dir, bool (*ours)(const char *dir, const char *name, void *arg),
                                 void *arg, char **first);

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
/* mkdir -p of tmp, the directory an output is built in before it is renamed to final (an output
 * written aside): a failure is reported under final, the name the user gave, with the reason
 * (GLM_ERR_IO, GLM_ERR_NOMEM). */
glm_status glm_mkdir_aside(const char *tmp, const char *final);
/* rm -rf of a directory tree (used for temp and pruned checkpoint dirs). Symbolic links are
 * removed, never followed. */
glm_status glm_rmtree(const char *path);
bool glm_is_dir(const char *path);
bool glm_is_file(const char *path);
/* "<a>/<b>" in a malloc'd string. */
char *glm_path_join(const char *a, const char *b);

/* Removes trailing '/' characters in place ("shards/" -> "shards", "/" stays "/"), so that a
 * directory given as `-o dir/` names the directory itself in temp names, renames and messages.
 * NULL is ignored. Returns p. */
char *glm_path_strip_slash(char *p);

#endif
