/*
 * ckpt_cli_restore: `ckpt restore` -- a checkpoint out of the store as files.
 *
 * Two forms:
 *   model (world 0): the GPT-2 parameters ("param/<group>" for every group
 *     in ft_gpt2's order) read into one fp32 array and written as Hugging
 *     Face GPT-2 safetensors by ft_gpt2_write_safetensors. Dims come from
 *     the checkpoint's config {"model":{n_layer,n_head,n_embd,vocab_size,
 *     seq_len}}.
 *   raw shard (world N, rank R): for every tensor, FSDP's slice for rank R
 *     (numel padded up to a multiple of N, S = padded / N, elements
 *     [R*S, min((R+1)*S, numel))), as a safetensors file of 1-D tensors named
 *     like the checkpoint's tensors; __metadata__ carries run, step, world,
 *     rank, and "offset.<name>" / "numel.<name>" (elements) per tensor.
 * Every byte comes through ckpt_store_read, which verifies each chunk's
 * SHA-256; a bad chunk stops the restore and nothing is left at PATH (files
 * are written to a temp name, fsynced and renamed).
 *
 * PATH must lie outside the store's folder (the local store, or an s3://
 * store's cache), after symbolic links and '..' are resolved: a restore
 * into it would replace a manifest, a chunk or the catalog (refused,
 * exit 2, before anything is read or made).
 * PATH: a new name, an existing regular file (replaced), or a folder (an
 * existing one, or a path ending in '/', made): rank<R>-of-<N>.safetensors
 * in it for a shard; for the model a Hugging Face model directory,
 * model.safetensors beside config.json (ft_gpt2_export_paths). Any
 * other existing thing (a device such as /dev/full, a FIFO, a symbolic link)
 * is refused before anything is read: the final rename would replace it.
 */
#include "ckpt_cli.h"
#include "ckpt_int.h"

#include "ft_err.h"
#include "ft_file.h"
#include "ft_gpt2.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int json_int(const cJSON *o, const char *k, int *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e9)
    return ft_err_set(FT_EFORMAT, "checkpoint config: model.%s is missing or not a positive number",
                      k);
  *v = (int)x->valuedouble;
  return FT_OK;
}

static int restore_model(ckpt_store *s, const ckpt_manifest *m, const char *path,
                         const char *config) {
  const ckpt_info *info = ckpt_manifest_info(m);
  cJSON *cfg = cJSON_Parse(ckpt_manifest_config_json(m));
  const cJSON *model = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "model") : NULL;
  ft_gpt2_dims d = {0};
  float *params = NULL;
  int rc = FT_OK;
  if (!cJSON_IsObject(model)) {
    rc = ft_err_set(FT_EFORMAT,
                    "checkpoint %s step %" PRId64 " has no GPT-2 model config; to get its "
                    "tensors as they are, use --world 1 --rank 0",
                    info->run, info->step);
    goto out;
  }
  if ((rc = json_int(model, "n_layer", &d.n_layer)) ||
      (rc = json_int(model, "n_head", &d.n_head)) ||
      (rc = json_int(model, "n_embd", &d.channels)) ||
      (rc = json_int(model, "vocab_size", &d.vocab_size)) ||
      (rc = json_int(model, "seq_len", &d.max_seq_len)))
    goto out;
  d.padded_vocab_size = ft_gpt2_pad_vocab(d.vocab_size);
  size_t n = ft_gpt2_num_params(&d);
  params = malloc(n * sizeof(float));
  if (!params) {
    rc = ft_err_set(FT_ENOMEM, "out of memory for %zu parameters", n);
    goto out;
  }
  int ng = ft_gpt2_ngroups(&d);
  for (int g = 0; g < ng; g++) {
    char gname[32], tname[64];
    ft_gpt2_group_name(&d, g, gname, sizeof gname);
    snprintf(tname, sizeof tname, "param/%s", gname);
    int ti = ckpt_manifest_find(m, tname);
    ckpt_tensor_info t;
    size_t bytes = ft_gpt2_group_numel(&d, g) * sizeof(float);
    if (ti < 0 || ckpt_manifest_tensor(m, ti, &t) || strcmp(t.dtype, "f32") != 0 ||
        t.nbytes != bytes) {
      rc = ft_err_set(FT_EFORMAT,
                      "checkpoint has no f32 tensor %s of %zu bytes as its config implies "
                      "(is it a GPT-2 checkpoint?)",
                      tname, bytes);
      goto out;
    }
    rc = ckpt_store_read(s, m, tname, 0, bytes, params + ft_gpt2_group_offset(&d, g));
    if (rc)
      goto out;
    ckpt_cli_progress("restore", (uint64_t)g + 1, (uint64_t)ng);
  }
  char step[32];
  snprintf(step, sizeof step, "%" PRId64, info->step);
  const char *keys[] = {"run", "step"};
  const char *vals[] = {info->run, step};
  rc = ft_gpt2_write_safetensors(path, &d, params, keys, vals, 2);
  if (!rc && config && config[0])
    rc = ft_gpt2_write_hf_config(config, &d);
out:
  free(params);
  cJSON_Delete(cfg);
  return rc;
}

static const char *st_dtype(const char *d) {
  static const char *map[][2] = {{"f32", "F32"}, {"bf16", "BF16"}, {"f16", "F16"}, {"i32", "I32"},
                                 {"i64", "I64"}, {"u8", "U8"},     {"u64", "U64"}, {"f64", "F64"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(d, map[i][0]))
      return map[i][1];
  return NULL;
}

static int restore_shard(ckpt_store *s, const ckpt_manifest *m, const char *path, int world,
                         int rank) {
  const ckpt_info *info = ckpt_manifest_info(m);
  int nt = ckpt_manifest_ntensors(m);
  uint64_t *start = calloc((size_t)nt + 1, sizeof *start), *count = calloc((size_t)nt + 1, 8);
  cJSON *root = cJSON_CreateObject();
  cJSON *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
  char *json = NULL, tmp[4096] = "", buf[64];
  uint8_t *data = NULL;
  int fd = -1, rc = FT_OK;
  if (!start || !count || !meta) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  cJSON_AddStringToObject(meta, "format", "ftckpt-shard");
  cJSON_AddStringToObject(meta, "run", info->run);
  snprintf(buf, sizeof buf, "%" PRId64, info->step);
  cJSON_AddStringToObject(meta, "step", buf);
  snprintf(buf, sizeof buf, "%d", world);
  cJSON_AddStringToObject(meta, "world", buf);
  snprintf(buf, sizeof buf, "%d", rank);
  cJSON_AddStringToObject(meta, "rank", buf);
  uint64_t off = 0, maxbytes = 0;
  for (int i = 0; i < nt; i++) {
    ckpt_tensor_info t;
    ckpt_manifest_tensor(m, i, &t);
    int es = ckpt_dtype_size(t.dtype);
    const char *sd = st_dtype(t.dtype);
    if (!es || !sd) {
      rc = ft_err_set(FT_EFORMAT, "tensor %s has dtype %s, which safetensors cannot hold", t.name,
                      t.dtype);
      goto out;
    }
    uint64_t numel = t.nbytes / (uint64_t)es;
    uint64_t padded = (numel + (uint64_t)world - 1) / (uint64_t)world * (uint64_t)world;
    uint64_t S = padded / (uint64_t)world;
    uint64_t a = (uint64_t)rank * S, b = a + S < numel ? a + S : numel;
    start[i] = a < numel ? a : numel;
    count[i] = b > start[i] ? b - start[i] : 0;
    uint64_t bytes = count[i] * (uint64_t)es;
    if (bytes > maxbytes)
      maxbytes = bytes;
    cJSON *o = cJSON_AddObjectToObject(root, t.name);
    cJSON_AddStringToObject(o, "dtype", sd);
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)count[i]));
    cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
    char k[300];
    snprintf(k, sizeof k, "offset.%s", t.name);
    snprintf(buf, sizeof buf, "%" PRIu64, start[i]);
    cJSON_AddStringToObject(meta, k, buf);
    snprintf(k, sizeof k, "numel.%s", t.name);
    snprintf(buf, sizeof buf, "%" PRIu64, numel);
    cJSON_AddStringToObject(meta, k, buf);
  }
  json = cJSON_PrintUnformatted(root);
  data = malloc(maxbytes ? maxbytes : 1);
  if (!json || !data) {
    rc = ft_err_set(FT_ENOMEM, "out of memory");
    goto out;
  }
  size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = ft_err_set(ft_err_from_errno(errno), "cannot create %s: %s", tmp, strerror(errno));
    goto out;
  }
  uint8_t le[8];
  for (int i = 0; i < 8; i++)
    le[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  if ((rc = ft_write_all(fd, le, 8, tmp)) || (rc = ft_write_all(fd, json, jlen, tmp)))
    goto out;
  for (size_t i = jlen; i < hlen; i++)
    if ((rc = ft_write_all(fd, " ", 1, tmp)))
      goto out;
  for (int i = 0; i < nt; i++) {
    ckpt_tensor_info t;
    ckpt_manifest_tensor(m, i, &t);
    uint64_t es = (uint64_t)ckpt_dtype_size(t.dtype);
    rc = ckpt_store_read(s, m, t.name, start[i] * es, count[i] * es, data);
    if (rc)
      goto out;
    if ((rc = ft_write_all(fd, data, count[i] * es, tmp)))
      goto out;
    ckpt_cli_progress("restore", (uint64_t)i + 1, (uint64_t)nt);
  }
  if (fsync(fd) != 0) {
    rc = ft_err_set(ft_err_from_errno(errno), "fsync %s: %s", tmp, strerror(errno));
    goto out;
  }
  close(fd);
  fd = -1;
  if (rename(tmp, path) != 0)
    rc = ft_err_set(ft_err_from_errno(errno), "rename %s to %s: %s", tmp, path, strerror(errno));
out:
  if (fd >= 0)
    close(fd);
  if (rc && tmp[0])
    unlink(tmp);
  free(data);
  free(json);
  cJSON_Delete(root);
  free(start);
  free(count);
  return rc;
}

/* path made absolute with every symbolic link and '..' resolved
 * (realpath), where it does not exist yet: its nearest existing ancestor
 * resolved, the rest appended. -1 if too long. */
static int resolve_path(const char *path, char out[PATH_MAX]) {
  char p[PATH_MAX], tail[PATH_MAX] = "", r[PATH_MAX];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
    return -1;
  for (;;) {
    size_t l = strlen(p);
    while (l > 1 && p[l - 1] == '/')
      p[--l] = 0;
    if (realpath(l ? p : ".", r)) {
      int w = snprintf(out, PATH_MAX, "%s%s", strcmp(r, "/") ? r : "", tail);
      if (!out[0])
        snprintf(out, PATH_MAX, "/");
      return w < 0 || w >= PATH_MAX ? -1 : 0;
    }
    char *sl = strrchr(p, '/'), t[PATH_MAX];
    if (snprintf(t, sizeof t, "/%s%s", sl ? sl + 1 : p, tail) >= (int)sizeof t)
      return -1;
    memcpy(tail, t, sizeof tail);
    if (!sl)
      snprintf(p, sizeof p, ".");
    else if (sl == p)
      snprintf(p, sizeof p, "/");
    else
      *sl = 0;
  }
}

int ckpt_cli_restore_outside(const char *to, const char *dir) {
  char t[PATH_MAX], d[PATH_MAX];
  if (resolve_path(to, t) || resolve_path(dir, d))
    return ft_err_set(FT_EINVAL, "--to %s: path too long", to);
  size_t l = strlen(d);
  if (strncmp(t, d, l) == 0 && (t[l] == 0 || t[l] == '/' || l == 1))
    return ft_err_set(FT_EINVAL,
                      "--to %s is inside the store's folder %s (it resolves to %s): restore "
                      "never writes into the store, where it would replace a manifest, a chunk "
                      "or the catalog; give a path outside it",
                      to, d, t);
  return FT_OK;
}

int ckpt_cli_restore_target(const char *to, int world, int rank, char *out, size_t n, char *config,
                            size_t config_len) {
  struct stat st;
  int w;
  if (config_len)
    config[0] = 0;
  if (world == 0) /* the model: one file, or a Hugging Face model directory */
    return ft_gpt2_export_paths(to, out, n, config, config_len);
  size_t tl = strlen(to);
  if (tl > 1 && to[tl - 1] == '/' && mkdir(to, 0777) != 0 && errno != EEXIST)
    return ft_err_set(ft_err_from_errno(errno), "--to %s: cannot make the folder: %s", to,
                      strerror(errno));
  if (stat(to, &st) == 0 && S_ISDIR(st.st_mode)) {
    w = snprintf(out, n, "%s%srank%d-of-%d.safetensors", to, to[tl - 1] == '/' ? "" : "/", rank,
                 world);
  } else {
    w = snprintf(out, n, "%s", to);
  }
  if (w < 0 || (size_t)w >= n)
    return ft_err_set(FT_EINVAL, "--to %s: path too long", to);
  /* the rename at the end replaces whatever is at the path: only ever a
   * regular file (never /dev/full, a FIFO, or the link instead of its target) */
  if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode))
    return ft_err_set(FT_EINVAL,
                      "--to %s: %s exists and is %s; restore writes regular files only and "
                      "will not replace it (give a new file name, an existing file, or a folder)",
                      to, out, ft_file_kind(st.st_mode));
  return FT_OK;
}

int ckpt_cli_restore(ckpt_store *s, const ckpt_manifest *m, const char *path, const char *config,
                     int world, int rank) {
  if (world > 0)
    return restore_shard(s, m, path, world, rank);
  return restore_model(s, m, path, config);
}
