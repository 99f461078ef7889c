/* tool/train/metrics.h: training logs for people and tools.
 * - metrics.jsonl: one JSON object per logged step (appended and flushed per line).
 * - TensorBoard event file (events.out.tfevents.<time>.<host>): TFRecord framing (u64 length,
 *   masked crc32c of the length, data, masked crc32c of the data; TensorFlow's
 *   record_writer.cc) around hand-encoded Event protobufs (tensorflow/core/util/event.proto:
 *   wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5,
 *   session_log = 7; Summary.value = 1, Value.tag = 1, Value.simple_value = 2 (float);
 *   SessionLog.status = 1 (enum: START = 1)).
 * - Resuming: metrics.jsonl is cut back to the checkpoint's step, and the resumed run's new event
 *   file starts with a SessionLog START marker, after which TensorBoard drops the points of the
 *   earlier files at and after the marker's step (event_accumulator's purge of orphaned data).
 * - loss.svg: train loss (raw and smoothed) and eval loss against step, like LLaMA-Factory's
 *   plot_loss. */
#ifndef GLM_METRICS_H
#define GLM_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

/* One logged step. NaN in an optional field leaves it out of metrics.jsonl / TensorBoard. */
typedef struct glm_metrics_rec {
    int64_t step;
    double epoch;
    double loss;              /* mean train loss over the logging window (NaN: none) */
    double grad_norm;
    double learning_rate;
    int64_t target_tokens;    /* target tokens in the window (< 0: leave out) */
    double tokens_per_second;  /* in total (every rank's tokens) */
    /* data parallel (n_ranks > 1; else left out): tokens/s of each rank [n_ranks], and the mean
     * share of the step time the ranks spent blocked in communication that compute did not hide */
    const double *tokens_per_second_rank;
    int n_ranks;
    double comm_share;
    /* several ranks: rank 0's bytes sent per optimizer step over the window, by kind
     * (GLM_COMM_KINDS entries: all_reduce, all_gather, sendrecv, host; be->comm_bytes); NULL: left out */
    const double *comm_bytes;
    double eval_loss;         /* NaN unless an eval step */
    double eval_perplexity;   /* exp(eval_loss); NaN unless an eval step */
} glm_metrics_rec;

/* A record with every optional field unset (NaN / -1). */
glm_metrics_rec glm_metrics_rec_empty(int64_t step);

typedef struct glm_metrics {
    FILE *jsonl;      /* metrics.jsonl, append mode */
    FILE *events;     /* TensorBoard event file */
    char *events_path;
} glm_metrics;

/* Opens <dir>/metrics.jsonl for appending (a resumed run continues the file) and, when
 * tensorboard is true, creates <dir>/runs/events.out.tfevents.<unix seconds>.<host>.<pid>
 * starting with the file_version "brain.Event:2" record. The seconds in the name are later than
 * those of every event file already there, so that readers, which take the files in name order,
 * read this one last. Errors: GLM_ERR_IO naming the file. */
glm_status glm_metrics_open(glm_metrics *m, const char *dir, bool tensorboard);
/* Appends one line to metrics.jsonl (keys step, epoch, loss, grad_norm, learning_rate,
 * target_tokens, tokens_per_second, with several ranks tokens_per_second_per_rank (a list) and
 * comm_exposed_share and comm_bytes_per_step ({"all_reduce", "all_gather", "sendrecv", "host"}: rank
 * 0's bytes sent per step, the window's mean), eval_loss, eval_perplexity; unset ones omitted) and one scalar per set
 * field to the event file (tags "train/loss", "train/grad_norm", "train/learning_rate",
 * "train/tokens_per_second", "train/tokens_per_second_per_rank" (their mean),
 * "train/comm_exposed_share", "train/epoch", "eval/loss", "eval/perplexity"), then flushes
 * both. Errors: GLM_ERR_IO. */
glm_status glm_metrics_log(glm_metrics *m, const glm_metrics_rec *r);
void glm_metrics_close(glm_metrics *m);

/* Resuming from the checkpoint of `step`: keeps the lines of <dir>/metrics.jsonl whose "step" is
 * <= step (and drops lines that are not JSON objects with a step, e.g. a line torn by a kill),
 * rewriting the file atomically; a missing file is fine. *dropped: lines removed (may be NULL).
 * Errors: GLM_ERR_IO naming the file. */
glm_status glm_metrics_truncate(const char *dir, int64_t step, int64_t *dropped);

/* Marks a restart in the event file of m: a SessionLog START at step + 1, where `step` is the
 * checkpoint's step. The checkpoint's own points (logged at `step`, after its update) stay; the
 * earlier run's points after it, superseded by this run, are dropped by TensorBoard. No-op
 * without an event file. Errors: GLM_ERR_IO. */
glm_status glm_metrics_restart(glm_metrics *m, int64_t step);

/* The JSON line for r, without newline (malloc'd; NULL when out of memory). */
char *glm_metrics_json_line(const glm_metrics_rec *r);

/* Writes one TFRecord holding a scalar Event (wall_time seconds since the epoch, step, one
 * Summary.Value{tag, simple_value}) to f. Errors: GLM_ERR_IO. */
glm_status glm_tb_write_scalar(FILE *f, double wall_time, int64_t step, const char *tag, float value);
/* Writes a restart marker: Event{wall_time, step, session_log {status START}}. TensorBoard's
 * EventAccumulator, reading it (file_version >= 2), purges every scalar already read whose step
 * is >= `step` (_CheckForRestartAndMaybePurge / _Purge: kept are x.step < event.step).
 * Errors: GLM_ERR_IO. */
glm_status glm_tb_write_session_start(FILE *f, double wall_time, int64_t step);
/* Writes the first record of an event file: Event{wall_time, file_version "brain.Event:2"}. */
glm_status glm_tb_write_version(FILE *f, double wall_time);
/* Frames `data` as one TFRecord: u64 LE length, u32 masked crc32c(length bytes), data,
 * u32 masked crc32c(data). Errors: GLM_ERR_IO. */
glm_status glm_tfrecord_write(FILE *f, const void *data, size_t n);

/* Writes the loss curve SVG atomically to `path`: train loss raw (thin, light) and smoothed
 * (LLaMA-Factory's smooth(): exponential moving average with weight
 * 1.8 * (1 / (1 + exp(-0.05 * n)) - 0.5), n = number of points), eval loss as a second line
 * with markers; x = step, y = loss, axes with "nice" ticks (1, 2, 5 x 10^k), labels, title and
 * legend. n_train / n_eval may be 0 (then only axes and a note). Errors: GLM_ERR_IO,
 * GLM_ERR_ARG when no finite point exists at all. */
glm_status glm_plot_loss_svg(const char *path, const int64_t *train_step, const double *train_loss,
                             size_t n_train, const int64_t *eval_step, const double *eval_loss,
                             size_t n_eval);

#endif
