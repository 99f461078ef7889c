#define _GNU_SOURCE
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

glm_status glm_afile_open(glm_afile *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->path = strdup(path);
    if (!af->path || asprintf(&af->tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
        free(af->path);
        return glm_err(GLM_ERR_NOMEM, "out of memory");
    }
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        glm_status s = glm_err(GLM_ERR_IO, "%s: cannot create: %s", af->tmp, strerror(errno));
        free(af->path);
        free(af->tmp);
        memset(af, 0, sizeof *af);
        return s;
    }
    return GLM_OK;
}

glm_status glm_afile_write(glm_afile *af, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, af->f) != n) {
        af->failed = true;
        return glm_err(GLM_ERR_IO, "%s: write failed: %s", af->tmp, strerror(errno));
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
    unlink(af->tmp);
    afile_release(af);
}

glm_status glm_afile_commit(glm_afile *af) {
    glm_status s = GLM_OK;
    if (af->failed || ferror(af->f) || fflush(af->f) != 0) {
        s = glm_err(GLM_ERR_IO, "%s: write failed: %s", af->tmp, strerror(errno));
    } else if (fsync(fileno(af->f)) != 0) {
        s = glm_err(GLM_ERR_IO, "%s: fsync failed: %s", af->tmp, strerror(errno));
    }
    if (fclose(af->f) != 0 && s == GLM_OK)
        s = glm_err(GLM_ERR_IO, "%s: close failed: %s", af->tmp, strerror(errno));
    af->f = NULL;
    if (s == GLM_OK && rename(af->tmp, af->path) != 0)
        s = glm_err(GLM_ERR_IO, "%s: rename to %s failed: %s", af->tmp, af->path, strerror(errno));
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

glm_status glm_commit_dir(const char *tmpdir, const char *dir) {
    GLM_TRY(fsync_files_in(tmpdir));
    char *old = NULL;
    if (glm_is_dir(dir)) {
        if (asprintf(&old, "%s.old.%d", dir, (int)getpid()) < 0) return glm_err(GLM_ERR_NOMEM, "out of memory");
        if (rename(dir, old) != 0) {
            glm_status s = glm_err(GLM_ERR_IO, "%s: cannot move aside: %s", dir, strerror(errno));
            free(old);
            return s;
        }
    }
    if (rename(tmpdir, dir) != 0) {
        glm_status s = glm_err(GLM_ERR_IO, "%s: rename to %s failed: %s", tmpdir, dir, strerror(errno));
        if (old) rename(old, dir);
        free(old);
        return s;
    }
    char *parent = dir_of(dir);
    glm_status s = parent ? glm_fsync_dir(parent) : GLM_OK;
    free(parent);
    if (old) {
        glm_rmtree(old);
        free(old);
    }
    return s;
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
