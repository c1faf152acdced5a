/* h5array: global float32 arrays in one HDF5 file, written and read by hyperslab over a
 * communicator through MPI-IO with collective transfers — the building block of checkpoints.
 * Also typed attributes on the root, groups or datasets, and listing the datasets of a group.
 * Depends on MPI and parallel HDF5 (not in this header: a communicator is mesh.h's mesh_comm);
 * knows no tensors and no model.
 *
 * Writing is atomic: h5array_create writes `path.tmp.<pid of rank 0>`; h5array_commit closes it,
 * fsyncs, and rank 0 renames it to `path` only after every rank has finished. A file that is
 * closed without a successful commit is deleted, so a failed save leaves any previous `path`
 * untouched and no temp file behind.
 *
 * Errors: every function that can fail returns 0 or a negative status with a message in
 * err[errlen] (err may be NULL), and ranks agree before returning (the status and the message of
 * the lowest failing rank are returned on every rank). Argument mistakes on one rank (a slab
 * outside the array, ranks disagreeing on a shape) are reported the same way, never by hanging.
 * Nothing is printed; HDF5's own error printing is switched off inside these calls.
 *
 * Dataset names are HDF5 paths ("w_in", "layers/3/w_in", "/opt/m/w_in"); missing groups on the
 * way are created. Shapes have 1 to H5ARRAY_MAX_DIMS dims, row-major; a slab is given by offset[]
 * and count[] per dim and its data is a dense row-major [count0, count1, ...] block. */
#ifndef MT_DATA_H5ARRAY_H
#define MT_DATA_H5ARRAY_H
#include <stddef.h>
#include <stdint.h>

#include "mesh/mesh.h"

#define H5ARRAY_MAX_DIMS 4
/* The most elements a dataset may hold: a larger shape in a file is damage, refused on opening, so
 * the product of a shape read from a file never overflows. */
#define H5ARRAY_MAX_ELEMS ((int64_t)1 << 40)

typedef struct h5array h5array;

/* Collective over: comm. Creates path.tmp.<pid of rank 0> for writing (truncating a stale one).
 * Returns 0 with *out set, or negative with *out = NULL. */
int h5array_create(h5array **out, const char *path, const mesh_comm *comm, char *err,
                   size_t errlen);
/* Collective over: comm. Opens an existing file read-only. Missing, empty and non-HDF5 files and
 * HDF5 files that cannot be opened (truncated, corrupt) are reported by name. */
int h5array_open(h5array **out, const char *path, const mesh_comm *comm, char *err, size_t errlen);
/* Collective over: the handle's comm. For a created file: closes it, fsyncs it and renames it to
 * its final path once all ranks are done. On failure the temp file is removed. Either way the
 * handle must still be closed with h5array_close. Calling it on an opened (read-only) file or
 * twice is a misuse reported as an error. */
int h5array_commit(h5array *f, char *err, size_t errlen);
/* Collective over: the handle's comm. Closes and frees; a created file that was not committed is
 * deleted. Accepts NULL. */
void h5array_close(h5array *f);
/* Not collective. The final path (a created file is written under a temp name until close). */
const char *h5array_path(const h5array *f);

/* Collective over: the handle's comm, every rank with the same name, ndim and dims. Creates the
 * float32 dataset `name` of global shape dims[ndim] and writes this rank's slab
 * data[count0, ...] at offset[]. A rank with writer = 0 writes nothing (an empty selection; offset,
 * count and data are ignored): use it on every copy but one of a replicated block. The writers'
 * slabs must tile the array: their element counts must add up to the array's size (checked), and
 * they must not overlap (not checked). Fails if the dataset exists. Test hook: with
 * MESHTRAIN_FAULT_SAVE=i set, the i-th call on each created file fails on every rank as a full
 * disk would (h5array.c, h5array_fault_point); with MESHTRAIN_FAULT_KILL_SAVE=R:I set, world
 * rank R SIGKILLs itself at the I-th call instead (h5array_kill_point). */
int h5array_write(h5array *f, const char *name, int ndim, const int64_t *dims,
                  const int64_t *offset, const int64_t *count, int writer, const float *data,
                  char *err, size_t errlen);
/* Collective over: the handle's comm (each rank with its own slab, possibly empty). Checks that
 * dataset `name` exists, is floating point and has exactly the shape dims[ndim] (else an error
 * naming the dataset and both shapes), then reads the slab at offset[] of count[] into
 * data[count0, ...] (overwritten), converted to float32. Ranks may read overlapping slabs. */
int h5array_read(h5array *f, const char *name, int ndim, const int64_t *dims, const int64_t *offset,
                 const int64_t *count, float *data, char *err, size_t errlen);
/* A slab's rows along dim 0 in blocks: `blocks` blocks of count[0] rows, block b at offset[0] +
 * b·stride (a pipeline rank's interleaved chunks of layers); the data holds the blocks one after
 * another. H5ARRAY_ONE_BLOCK: the plain slab. */
typedef struct {
    int64_t blocks, stride;
} h5array_rows;
#define H5ARRAY_ONE_BLOCK ((h5array_rows){1, 0})
/* h5array_write and h5array_read of a slab in dim-0 blocks. */
int h5array_write_rows(h5array *f, const char *name, int ndim, const int64_t *dims,
                       const int64_t *offset, const int64_t *count, h5array_rows rows,
                       int writer, const float *data, char *err, size_t errlen);
int h5array_read_rows(h5array *f, const char *name, int ndim, const int64_t *dims,
                      const int64_t *offset, const int64_t *count, h5array_rows rows, float *data,
                      char *err, size_t errlen);
/* Collective over: the handle's comm. The shape of dataset `name`: *ndim and dims[0..ndim). A
 * shape with a zero extent or more than H5ARRAY_MAX_ELEMS elements is refused (a damaged file). */
int h5array_shape(h5array *f, const char *name, int *ndim, int64_t dims[H5ARRAY_MAX_DIMS],
                  char *err, size_t errlen);

/* Collective over: the handle's comm, every rank with the same arguments. Attribute `key` on
 * object `obj` ("/" for the root, or a group or dataset path; a missing group is created when
 * writing). Writing replaces an existing attribute. Reading a missing attribute is an error that
 * names it; strings are truncated to vallen − 1 bytes; integers and doubles are read from any
 * integer or float type respectively. */
int h5array_attr_put_str(h5array *f, const char *obj, const char *key, const char *val, char *err,
                         size_t errlen);
int h5array_attr_put_i64(h5array *f, const char *obj, const char *key, int64_t val, char *err,
                         size_t errlen);
int h5array_attr_put_f64(h5array *f, const char *obj, const char *key, double val, char *err,
                         size_t errlen);
int h5array_attr_get_str(h5array *f, const char *obj, const char *key, char *val, size_t vallen,
                         char *err, size_t errlen);
int h5array_attr_get_i64(h5array *f, const char *obj, const char *key, int64_t *val, char *err,
                         size_t errlen);
int h5array_attr_get_f64(h5array *f, const char *obj, const char *key, double *val, char *err,
                         size_t errlen);

/* Collective over: the handle's comm. The datasets in `group` ("/" for the root), in name order,
 * as paths relative to the group; with recursive != 0 also those in its subgroups ("layers/0/w").
 * *names is a malloc'd array of *count strings, freed with h5array_names_free. */
int h5array_list(h5array *f, const char *group, int recursive, char ***names, int *count, char *err,
                 size_t errlen);
/* Not collective. Frees a list from h5array_list. Accepts NULL. */
void h5array_names_free(char **names, int count);
#endif
