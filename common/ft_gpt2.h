/*
 * ft_gpt2: GPT-2's parameter layout, and the model files people use.
 *
 * One layout shared by the trainer (worker/), the checkpoint CLI (ckpt
 * restore writes safetensors) and the tests, so that all of them agree on
 * every offset. The parameters live in one contiguous fp32 array made of
 * "groups", each group one flat buffer (the unit FSDP shards):
 *
 *   group 0        "wte"   (Vp, C)   token embedding, tied with the output
 *   group 1        "wpe"   (maxT, C) position embedding
 *   group 2+l      "h.l"   block l, its 12 tensors back to back:
 *                          ln1w (C) ln1b (C) qkvw (3C, C) qkvb (3C)
 *                          attprojw (C, C) attprojb (C) ln2w (C) ln2b (C)
 *                          fcw (4C, C) fcb (4C) fcprojw (C, 4C) fcprojb (C)
 *   group 2+L      "lnf"   lnfw (C) lnfb (C)
 *
 * Linear weights are (out, in) as in PyTorch's nn.Linear; Hugging Face's
 * GPT-2 uses Conv1D, (in, out), so export transposes them.
 * Vp is the vocabulary padded to a multiple of 128 (rows V..Vp-1 of wte are
 * padding, never a target, exported without them).
 */
#ifndef FT_GPT2_H
#define FT_GPT2_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ft_gpt2_dims {
  int max_seq_len;       /* maxT */
  int vocab_size;        /* V */
  int padded_vocab_size; /* Vp */
  int n_layer;           /* L */
  int n_head;            /* NH */
  int channels;          /* C */
} ft_gpt2_dims;

/* Vp for V: the next multiple of 128. */
int ft_gpt2_pad_vocab(int V);

enum ft_gpt2_btensor {
  FT_B_LN1W,
  FT_B_LN1B,
  FT_B_QKVW,
  FT_B_QKVB,
  FT_B_ATTPROJW,
  FT_B_ATTPROJB,
  FT_B_LN2W,
  FT_B_LN2B,
  FT_B_FCW,
  FT_B_FCB,
  FT_B_FCPROJW,
  FT_B_FCPROJB,
  FT_B_COUNT
};

/* Number of groups: L + 3. */
int ft_gpt2_ngroups(const ft_gpt2_dims *d);
/* Name of group g ("wte", "wpe", "h.3", "lnf") into buf; returns buf. */
char *ft_gpt2_group_name(const ft_gpt2_dims *d, int g, char *buf, size_t len);
/* Elements in group g, and its offset (elements) in the full array. */
size_t ft_gpt2_group_numel(const ft_gpt2_dims *d, int g);
size_t ft_gpt2_group_offset(const ft_gpt2_dims *d, int g);
/* Total parameter count (sum over groups). */
size_t ft_gpt2_num_params(const ft_gpt2_dims *d);
/* Offset (elements) of block tensor t inside a block group, and its size. */
size_t ft_gpt2_block_offset(const ft_gpt2_dims *d, int t);
size_t ft_gpt2_block_numel(const ft_gpt2_dims *d, int t);
/* Whether weight decay applies to a block tensor (2-D weights: yes; biases
 * and LayerNorm parameters: no). wte/wpe decay; lnf does not. */
int ft_gpt2_block_decays(int t);

/* Reads an llm.c model file (header 256 x int32: magic 20240326, version 3
 * = fp32, maxT, V, L, NH, C, Vp; then the 16 tensors in llm.c's order) into
 * a new array in this layout. *params is malloc'd (caller frees).
 * Errors name the file: FT_EIO, FT_EFORMAT. */
int ft_gpt2_read_llmc(const char *path, ft_gpt2_dims *d, float **params);
/* Writes params in llm.c's model file format (for round-trip tests and for
 * llm.c users). Crash-safe (temp file, fsync, rename). */
int ft_gpt2_write_llmc(const char *path, const ft_gpt2_dims *d, const float *params);

/* Writes the model as safetensors with Hugging Face GPT-2 names and shapes
 * ("wte.weight" (V, C), "wpe.weight", "h.N.ln_1.weight", "h.N.attn.c_attn.weight"
 * (C, 3C), ..., "ln_f.bias"), Conv1D weights transposed. The header's
 * __metadata__ carries {"format":"pt"} plus the given JSON-free key/values
 * (meta_keys/meta_vals, n_meta; may be 0). Crash-safe. */
int ft_gpt2_write_safetensors(const char *path, const ft_gpt2_dims *d, const float *params,
                              const char *const *meta_keys, const char *const *meta_vals,
                              int n_meta);

/* ---- Hugging Face model directory --------------------------------------- */

/* Where an export to `to` goes. A folder target -- `to` is an existing
 * folder or ends in '/' (then created, one level) -- gets a Hugging Face
 * model directory: model = TO/model.safetensors, config = TO/config.json.
 * Anything else is one safetensors file: model = TO, config = "". Refuses,
 * before anything is written, a target that exists and is not a regular
 * file (a device, FIFO or symbolic link: the final rename would replace
 * it). FT_EINVAL naming the path, FT_EIO if the folder cannot be made. */
int ft_gpt2_export_paths(const char *to, char *model, size_t model_len, char *config,
                         size_t config_len);

/* The config.json `transformers` needs to load the model with
 * GPT2LMHeadModel.from_pretrained: GPT2Config's keys (n_layer, n_head,
 * n_embd, n_positions, n_ctx, vocab_size, gelu_new, layer_norm_epsilon
 * 1e-5, no dropout, tied embeddings, float32), written crash-safe. */
int ft_gpt2_write_hf_config(const char *path, const ft_gpt2_dims *d);

/* The export both `worker --export` and `ckpt restore --to` do: resolves
 * `to` with ft_gpt2_export_paths, writes the safetensors and, for a folder,
 * config.json beside it (the safetensors first, so a folder holding a
 * config.json holds its weights). */
int ft_gpt2_export(const char *to, const ft_gpt2_dims *d, const float *params,
                   const char *const *meta_keys, const char *const *meta_vals, int n_meta);

/* ---- safetensors reading -------------------------------------------------- */

#define FT_ST_MAX_HEADER (100u << 20) /* the format's limit on the JSON header */
#define FT_ST_MAX_DIMS 8

/* One tensor of a safetensors header. */
typedef struct ft_st_tensor {
  char name[128];
  char dtype[8]; /* "F32", "BF16", ... */
  int ndim;
  uint64_t shape[FT_ST_MAX_DIMS];
  uint64_t begin, end; /* byte range in the data section, which follows the header */
} ft_st_tensor;

/* Parses a safetensors header: head holds the file's first head_len bytes
 * (the 8-byte little-endian header size N, then N bytes of JSON), file_size
 * is the whole file's size. Checks that N fits the file and FT_ST_MAX_HEADER;
 * that the JSON is one object (trailing spaces allowed) whose __metadata__,
 * if any, maps names to strings; that every other member is a tensor with a
 * known dtype, a shape of at most FT_ST_MAX_DIMS integers, and data_offsets
 * [begin, end] holding exactly shape x dtype bytes (no overflow); that names
 * are unique and the tensors tile the data section with no gap or overlap.
 * On success *out (malloc'd, caller frees) holds *n tensors sorted by begin
 * and *data_off (may be NULL) is 8 + N. FT_EFORMAT (detail naming `name`),
 * FT_EINVAL if head_len is shorter than 8 + N, FT_ENOMEM. */
int ft_st_parse_header(const char *name, const void *head, size_t head_len, uint64_t file_size,
                       ft_st_tensor **out, int *n, uint64_t *data_off);

/* Reads a GPT-2 model from safetensors in Hugging Face's names and shapes
 * (what ft_gpt2_write_safetensors writes: F32, Conv1D weights (in, out))
 * into a new array in this layout (padding rows of wte zero). Dims come
 * from the shapes (wte (V, C), wpe (maxT, C), layers h.0..h.L-1); the file
 * does not hold n_head, the caller gives it. Tensors the layout does not
 * use are ignored. Errors name the file: FT_EIO, FT_EFORMAT, FT_ENOMEM. */
int ft_gpt2_read_safetensors(const char *path, int n_head, ft_gpt2_dims *d, float **params);

#ifdef __cplusplus
}
#endif
#endif
