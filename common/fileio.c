#define _GNU_SOURCE
#include "fileio.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

char *glm_path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    size_t k = la;
    if (la && a[la - 1] != '/') p[k++] = '/';
    memcpy(p + k, b, lb + 1);
    return p;
}

static char *dir_of(const char *path) {
    char *c = strdup(path);
    if (!c) return NULL;
    char *d = strdup(dirname(c));
    free(c);
    return d;
}

glm_status glm_lock_dir(const char *dir, const char *holder, const char *opt, int *fd) {
    for (int tries = 0; *fd < 0 && glm_is_dir(dir); tries++) {
        int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d < 0)
            return glm_err(GLM_ERR_IO, "%s: cannot open the output directory: %s; hint: check its permissions", dir,
                           strerror(errno));
        if (flock(d, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(d);
            if (e == EWOULDBLOCK)
                return glm_err(GLM_ERR_ARG, "%s is in use by another %s (it holds the directory's lock); hint: wait "
                               "for that run to end, stop it, or choose another %s", dir, holder, opt);
            glm_log_warn("%s: cannot lock the output directory (%s): a second run into it would not be stopped", dir,
                         strerror(e));
            return GLM_OK;
        }
        struct stat held, now;
        if (fstat(d, &held) == 0 && stat(dir, &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
            *fd = d;
            return GLM_OK;
        }
        close(d); /* replaced while the lock was taken: lock what the name holds now */
        if (tries == 100)
            return glm_err(GLM_ERR_IO, "%s: replaced again and again while its lock was taken; hint: check what else "
                           "writes %s", dir, dir);
    }
    return GLM_OK;
}

glm_status glm_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return glm_err(GLM_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL)
        return glm_err(GLM_ERR_IO, "%s: fsync of directory failed: %s", dir, strerror(e));
    return GLM_OK;
}

/* Whether `dir` is a process's descriptor table (/proc/<pid>/fd, /proc/<pid>/task/<tid>/fd), so
 * that a name in it is an open descriptor (/dev/stdout -> /proc/self/fd/1). */
static bool is_fd_dir(const char *dir) {
    char *r = realpath(dir, NULL);
    if (!r) return false;
    bool yes = false;
    if (!strncmp(r, "/proc/", 6)) {
        const char *p = r + 6;
        if (*p >= '0' && *p <= '9') {
            while (*p >= '0' && *p <= '9') p++;
            if (!strncmp(p, "/task/", 6)) {
                p += 6;
                while (*p >= '0' && *p <= '9') p++;
            }
            yes = !strcmp(p, "/fd");
        }
    }
    free(r);
    return yes;
}

glm_status glm_output_target(const char *path, char **target, bool *through) {
    *target = NULL;
    *through = false;
    char *cur = strdup(path);
    if (!cur) return glm_err(GLM_ERR_NOMEM, "out of memory");
    for (int hop = 0; hop < 40; hop++) {
        char *d = dir_of(cur);
        bool fd = d && is_fd_dir(d);
        free(d);
        if (fd) { /* an open descriptor: write through it */
            *through = true;
            *target = cur;
            return GLM_OK;
        }
        struct stat st;
        if (lstat(cur, &st) != 0) {
            if (errno == ENOENT) { /* a new file (or a dangling link's target) */
                *target = cur;
                return GLM_OK;
            }
            glm_status s = glm_err(GLM_ERR_IO, "%s: cannot examine %s: %s", path, cur, strerror(errno));
            free(cur);
            return s;
        }
        if (S_ISLNK(st.st_mode)) {
            char buf[4096];
            ssize_t n = readlink(cur, buf, sizeof buf - 1);
            if (n < 0) {
                glm_status s = glm_err(GLM_ERR_IO, "%s: cannot read the link %s: %s", path, cur, strerror(errno));
                free(cur);
                return s;
            }
            buf[n] = 0;
            char *next;
            if (buf[0] == '/') {
                next = strdup(buf);
            } else {
                char *cd = dir_of(cur);
                next = cd ? glm_path_join(cd, buf) : NULL;
                free(cd);
            }
            free(cur);
            if (!next) return glm_err(GLM_ERR_NOMEM, "out of memory");
            cur = next;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            glm_status s = glm_err(GLM_ERR_IO, "%s is a directory; hint: name a file", path);
            free(cur);
            return s;
        }
        *through = !S_ISREG(st.st_mode); /* FIFO, device, socket: write through */
        *target = cur;
        return GLM_OK;
    }
    free(cur);
    return glm_err(GLM_ERR_IO, "%s: too many levels of symbolic links", path);
}

glm_status glm_afile_open(glm_afile *af, const char *path) {
    memset(af, 0, sizeof *af);
    char *target;
    bool through;
    GLM_TRY(glm_output_target(path, &target, &through));
    af->path = target;
    af->through = through;
    struct stat st;
    af->existed = !through && stat(target, &st) == 0;
    if (through) {
        /* O_APPEND: a regular file behind /dev/stdout (`> file`, `>> file`) is written at its
         * end, not from offset 0 over what the shell or this process put there */
        int fd = open(target, O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
        af->f = fd >= 0 ? fdopen(fd, "ab") : NULL;
        if (!af->f) {
            glm_status s = glm_err(GLM_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            free(af->path);
            memset(af, 0, sizeof *af);
            return s;
        }
        return GLM_OK;
    }
    if (asprintf(&af->tmp, "%s.tmp.%d", target, (int)getpid()) < 0) {
        free(af->path);
        memset(af, 0, sizeof *af);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        glm_status s = glm_err(GLM_ERR_IO, "%s: cannot create its temporary file %s: %s; hint: check that the folder "
                               "exists and is writable", target, af->tmp, strerror(errno));
        free(af->path);
        free(af->tmp);
        memset(af, 0, sizeof *af);
        return s;
    }
    return GLM_OK;
}

/* What a failed write leaves and what to do: a temporary file was written, so an earlier file of that name
 * stays as it was, and a new file is not created at all. */
static const char *write_hint(int e, const glm_afile *af) {
    if (e == EFBIG) {
        if (af->through)
            return "; hint: the file size limit of this process (ulimit -f) is too low: raise it (ulimit -f unlimited)";
        return af->existed ? " (the earlier file of that name is left as it was); hint: the file size limit of this "
                             "process (ulimit -f) is too low: raise it (ulimit -f unlimited)"
                           : " (the file was not created); hint: the file size limit of this process (ulimit -f) is "
                             "too low: raise it (ulimit -f unlimited)";
    }
    if (af->through) return e == ENOSPC ? " (the disk is full); hint: free space on it (df -h)" : "";
    if (e == ENOSPC)
        return af->existed ? " (the disk is full while writing this file; the earlier file of that name is left as it "
                             "was); hint: free space on that disk (df -h) and run again"
                           : " (the disk is full while writing this file; it was not created); hint: free space on that "
                             "disk (df -h) and run again";
    return af->existed ? " (the earlier file of that name is left as it was)" : " (the file was not created)";
}

glm_status glm_afile_write(glm_afile *af, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, af->f) != n) {
        af->failed = true;
        return glm_err(GLM_ERR_IO, "%s: cannot write: %s%s", af->path, strerror(errno), write_hint(errno, af));
    }
    return GLM_OK;
}

static void afile_release(glm_afile *af) {
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
}

void glm_afile_abort(glm_afile *af) {
    if (!af->f) return;
    fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    afile_release(af);
}

glm_status glm_afile_commit(glm_afile *af) {
    glm_status s = GLM_OK;
    const char *name = af->path;
    if (af->failed || ferror(af->f) || fflush(af->f) != 0) {
        s = glm_err(GLM_ERR_IO, "%s: cannot write: %s%s", name, strerror(errno), write_hint(errno, af));
    } else if (fsync(fileno(af->f)) != 0 &&
               !(af->through && (errno == EINVAL || errno == EROFS || errno == ENOTSUP || errno == ENOTTY))) {
        /* a pipe or a terminal cannot be fsynced (EINVAL): nothing to make durable there */
        s = glm_err(GLM_ERR_IO, "%s: fsync failed: %s", name, strerror(errno));
    }
    if (fclose(af->f) != 0 && s == GLM_OK)
        s = glm_err(GLM_ERR_IO, "%s: close failed: %s", name, strerror(errno));
    af->f = NULL;
    if (af->through) {
        afile_release(af);
        return s;
    }
    if (s == GLM_OK && rename(af->tmp, af->path) != 0)
        s = glm_err(GLM_ERR_IO, "%s: cannot put it in place (rename from %s): %s", af->path, af->tmp, strerror(errno));
    if (s != GLM_OK) {
        unlink(af->tmp);
    } else {
        char *d = dir_of(af->path);
        if (d) s = glm_fsync_dir(d);
        free(d);
    }
    afile_release(af);
    return s;
}

glm_status glm_write_file_atomic(const char *path, const void *data, size_t n) {
    glm_afile af;
    GLM_TRY(glm_afile_open(&af, path));
    glm_status s = glm_afile_write(&af, data, n);
    if (s != GLM_OK) {
        glm_afile_abort(&af);
        return s;
    }
    return glm_afile_commit(&af);
}

static glm_status fsync_files_in(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return glm_err(GLM_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    struct dirent *e;
    glm_status s = GLM_OK;
    while (s == GLM_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        char *p = glm_path_join(dir, e->d_name);
        struct stat st;
        if (p && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            int fd = open(p, O_RDONLY);
            if (fd < 0 || fsync(fd) != 0) s = glm_err(GLM_ERR_IO, "%s: fsync failed: %s", p, strerror(errno));
            if (fd >= 0) close(fd);
        }
        free(p);
    }
    closedir(d);
    if (s == GLM_OK) s = glm_fsync_dir(dir);
    return s;
}

glm_status glm_commit_dir(const char *tmpdir, const char *dir_in) {
    GLM_TRY(fsync_files_in(tmpdir));
    struct stat lst;
    char *dir = NULL;
    if (lstat(dir_in, &lst) == 0 && S_ISLNK(lst.st_mode)) { /* replace the link's target, keep the link */
        GLM_TRY(glm_output_target_dir(dir_in, &dir));
    } else {
        dir = strdup(dir_in);
    }
    if (!dir) return glm_err(GLM_ERR_NOMEM, "out of memory");
    struct stat st;
    bool exists = stat(dir, &st) == 0;
    glm_status s = GLM_OK;
    char *parent = dir_of(dir);
    if (exists && !S_ISDIR(st.st_mode)) {
        s = glm_err(GLM_ERR_IO, "%s exists and is not a directory", dir);
    } else if (exists && renameat2(AT_FDCWD, tmpdir, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        /* one atomic step: `dir` holds the new content, `tmpdir` the old one */
        s = parent ? glm_fsync_dir(parent) : GLM_OK;
        glm_rmtree(tmpdir);
    } else if (exists && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        s = glm_err(GLM_ERR_IO, "%s: cannot swap in %s: %s", dir, tmpdir, strerror(errno));
    } else if (exists) {
        /* no RENAME_EXCHANGE on this filesystem: move the old one aside first */
        char *old = NULL;
        if (asprintf(&old, "%s.old.%d", dir, (int)getpid()) < 0) {
            s = glm_err(GLM_ERR_NOMEM, "out of memory");
        } else if (rename(dir, old) != 0) {
            s = glm_err(GLM_ERR_IO, "%s: cannot move aside: %s", dir, strerror(errno));
        } else if (rename(tmpdir, dir) != 0) {
            s = glm_err(GLM_ERR_IO, "%s: rename to %s failed: %s", tmpdir, dir, strerror(errno));
            rename(old, dir);
        } else {
            s = parent ? glm_fsync_dir(parent) : GLM_OK;
            glm_rmtree(old);
        }
        free(old);
    } else if (rename(tmpdir, dir) != 0) {
        s = glm_err(GLM_ERR_IO, "%s: rename to %s failed: %s", tmpdir, dir, strerror(errno));
    } else {
        s = parent ? glm_fsync_dir(parent) : GLM_OK;
    }
    free(parent);
    free(dir);
    return s;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

glm_status glm_dir_first_foreign(const char *dir, bool (*ours)(const char *dir, const char *name, void *arg),
                                 void *arg, char **first) {
    *first = NULL;
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0) {
        if (errno == ENOENT) return GLM_OK;
        return glm_err(GLM_ERR_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
    }
    glm_status s = GLM_OK;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (!*first && s == GLM_OK && strcmp(nm, ".") && strcmp(nm, "..") && !ours(dir, nm, arg) &&
            !(*first = strdup(nm)))
            s = glm_err(GLM_ERR_NOMEM, "out of memory");
        free(names[i]);
    }
    free(names);
    return s;
}

glm_status glm_output_target_dir(const char *path, char **target) {
    *target = NULL;
    struct stat lst;
    if (lstat(path, &lst) != 0 || !S_ISLNK(lst.st_mode)) {
        *target = strdup(path);
        return *target ? GLM_OK : glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    char *r = realpath(path, NULL);
    if (r) {
        *target = r;
        return GLM_OK;
    }
    /* a dangling link: follow it by hand to the name it points at */
    char *cur = strdup(path);
    for (int hop = 0; cur && hop < 40; hop++) {
        if (lstat(cur, &lst) != 0 || !S_ISLNK(lst.st_mode)) {
            *target = cur;
            return GLM_OK;
        }
        char buf[4096];
        ssize_t n = readlink(cur, buf, sizeof buf - 1);
        if (n < 0) break;
        buf[n] = 0;
        char *next;
        if (buf[0] == '/') {
            next = strdup(buf);
        } else {
            char *cd = dir_of(cur);
            next = cd ? glm_path_join(cd, buf) : NULL;
            free(cd);
        }
        free(cur);
        cur = next;
    }
    free(cur);
    return glm_err(GLM_ERR_IO, "%s: cannot follow the symbolic link: %s", path, strerror(errno ? errno : ELOOP));
}

void glm_cleanup_leftovers(const char *path) {
    char *d = dir_of(path), *copy = strdup(path);
    if (!d || !copy) {
        free(d);
        free(copy);
        return;
    }
    const char *base = strrchr(copy, '/') ? strrchr(copy, '/') + 1 : copy;
    size_t nb = strlen(base);
    DIR *dh = nb ? opendir(d) : NULL;
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        if (strncmp(e->d_name, base, nb)) continue;
        const char *rest = e->d_name + nb;
        bool tmp = !strncmp(rest, ".tmp.", 5), old = !strncmp(rest, ".old.", 5);
        if (!tmp && !old) continue;
        char *end;
        errno = 0;
        long pid = strtol(rest + 5, &end, 10);
        if (*end || errno || pid <= 0) continue;
        if (pid != (long)getpid() && !(kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue; /* still running */
        char *p = glm_path_join(d, e->d_name);
        struct stat st;
        if (!p) continue;
        if (old && lstat(path, &st) != 0 && errno == ENOENT) {
            if (rename(p, path) == 0)
                glm_log_warn("%s was missing (a run was killed while replacing it): restored the previous one from %s",
                             path, p);
        } else {
            glm_log_info("removing %s, left by an interrupted run", p);
            glm_rmtree(p);
        }
        free(p);
    }
    if (dh) closedir(dh);
    free(d);
    free(copy);
}

glm_status glm_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return glm_err(GLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return glm_err(GLM_ERR_NOMEM, "%s: out of memory reading file", path);
    if (err) {
        free(buf);
        return glm_err(GLM_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return GLM_OK;
}

glm_status glm_mmap_open(glm_mmap *m, const char *path) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return glm_err(GLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return glm_err(GLM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return glm_err(GLM_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return GLM_OK;
}

void glm_mmap_close(glm_mmap *m) {
    if (m->data) munmap(m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

glm_status glm_mkdir_aside(const char *tmp, const char *final) {
    glm_status st = glm_mkdir_p(tmp);
    if (st == GLM_OK || st == GLM_ERR_NOMEM) return st;
    char why[512];
    snprintf(why, sizeof why, "%s", glm_errmsg());
    return glm_err(st, "%s: cannot create the output (it is built beside it first: %s); hint: an output path in a "
                   "directory you can write to", final, why);
}

glm_status glm_mkdir_p(const char *path) {
    char *p = strdup(path);
    if (!p) return glm_err(GLM_ERR_NOMEM, "out of memory");
    for (char *s = p + 1; ; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                glm_status st = glm_err(GLM_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
                free(p);
                return st;
            }
            *s = c;
            if (!c) break;
        }
    }
    free(p);
    if (!glm_is_dir(path)) return glm_err(GLM_ERR_IO, "%s: exists and is not a directory", path);
    return GLM_OK;
}

glm_status glm_rmtree(const char *path) {
    /* A symlink (to a directory too) is removed itself: never descend into what it points at. */
    struct stat lst;
    DIR *d = lstat(path, &lst) == 0 && S_ISDIR(lst.st_mode) ? opendir(path) : NULL;
    if (!d) return unlink(path) == 0 || errno == ENOENT ? GLM_OK : glm_err(GLM_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        char *p = glm_path_join(path, e->d_name);
        if (p) glm_rmtree(p);
        free(p);
    }
    closedir(d);
    if (rmdir(path) != 0) return glm_err(GLM_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return GLM_OK;
}

bool glm_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool glm_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *glm_path_strip_slash(char *p) {
    if (!p) return p;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    return p;
}
