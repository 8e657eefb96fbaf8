/* Shared by the CPU and CUDA libraries behind kc_logp.h: the argument checks and the
 * status texts, so both backends refuse the same arguments with the same words. */
#ifndef KC_ABI_COMMON_H
#define KC_ABI_COMMON_H

#include <stdint.h>

#include "kc_logp.h"

/* KC_OK, or the status that the arguments of a forward/backward call earn. */
static inline int kc_check_args(int dtype, int64_t rows, int64_t vocab, int64_t stride) {
  if (dtype != KC_FLOAT32 && dtype != KC_BFLOAT16 && dtype != KC_FLOAT16) return KC_ERR_DTYPE;
  if (rows < 0 || vocab <= 0 || stride < vocab) return KC_ERR_SHAPE;
  return KC_OK;
}

/* The text of a status; a backend passes its own launch and device error texts. */
static inline const char* kc_status_text(int status, const char* launch_error,
                                         const char* device_error) {
  switch (status) {
    case KC_OK:
      return "ok";
    case KC_ERR_DTYPE:
      return "unsupported dtype (expected KC_FLOAT32, KC_BFLOAT16 or KC_FLOAT16)";
    case KC_ERR_SHAPE:
      return "invalid shape (need rows >= 0, vocab > 0, row_stride >= vocab)";
    case KC_ERR_NULL:
      return "null pointer argument";
    case KC_ERR_LAUNCH:
      return launch_error;
    case KC_ERR_DEVICE:
      return device_error;
    default:
      return "unknown status";
  }
}

#endif /* KC_ABI_COMMON_H */
