/* TensorBoard event files, as MaxText and Pax write them, so that
 * `tensorboard --logdir RUN/tensorboard` plots a run: the file
 * events.out.tfevents.<seconds>.<host>.<pid> holds TFRecord frames
 *   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
 *   length bytes of data, uint32 masked CRC32C of the data
 * (mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8), each data an Event
 * protocol buffer: the first {wall_time, file_version "brain.Event:2"},
 * then {wall_time, step, summary {value {tag, simple_value}}...}.
 * The protocol buffers are encoded by hand: pp depends on no protobuf
 * library for four fields. */
#ifndef PP_TENSORBOARD_H
#define PP_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"

typedef struct tb_writer tb_writer;

/* Creates DIR (mkdir -p) and a new event file in it. */
int tb_open(tb_writer **w, const char *dir, pp_err *e);
/* One event at step: n scalars, tags[i] = values[i] (as float32, as
 * TensorBoard keeps them), flushed to the file. */
int tb_scalars(tb_writer *w, long step, const char *const *tags, const double *values, int n,
	       pp_err *e);
void tb_close(tb_writer *w);

/* CRC-32C (Castagnoli), and the masked form the frames carry. */
uint32_t tb_crc32c(const void *data, size_t n);
uint32_t tb_masked_crc(const void *data, size_t n);

#endif
