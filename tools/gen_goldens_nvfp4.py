"""Goldens for `nvfp4_quantize` in `exact` mode: a numpy port (fp32) of FlashInfer's
reference quantizer `tests/test_helpers/utils_fp4.ref_fp4_quant` + `cast_to_fp4x2`:

    vec_max = max |x| per 16-element block                   (fp32)
    scale   = global * (vec_max * float32(1/6))              (fp32)
    scale   = float(scale.to(float8_e4m3fn))                 (non-saturating cast)
    out_s   = scale == 0 ? 0 : 1 / (scale * (1 / global))    (fp32, torch.where + reciprocal)
    codes   = e2m1(clamp(x * out_s, -6, 6)), two per byte, element 0 in the low nibble
    global  = (448 * 6) / amax(x)                            (fp32; FlashInfer's tests)

Swizzled scales follow FlashInfer's 128x4 layout (the inverse of `recover_swizzled_scales`).
torch is not installed here; the same fp32 operations run in numpy, with ml_dtypes for the
E4M3 cast.

    /tmp/gvenv/bin/python tools/gen_goldens_nvfp4.py
"""

import ml_dtypes
import numpy as np

from goldens_common import params, save

F32 = np.float32


def cast_to_fp4x2(x):
    r = np.zeros(x.shape, dtype=np.uint8)
    r[(x >= 0.0) & (x <= 0.25)] = 0
    r[(x > 0.25) & (x < 0.75)] = 1
    r[(x >= 0.75) & (x <= 1.25)] = 2
    r[(x > 1.25) & (x < 1.75)] = 3
    r[(x >= 1.75) & (x <= 2.5)] = 4
    r[(x > 2.5) & (x < 3.5)] = 5
    r[(x >= 3.5) & (x <= 5.0)] = 6
    r[x > 5.0] = 7
    # x < -0.0 is false for -0.0 itself; tiny negatives get the negative zero code.
    r[(x >= -0.25) & (x < -0.0)] = 8
    r[(x < -0.25) & (x > -0.75)] = 9
    r[(x <= -0.75) & (x >= -1.25)] = 10
    r[(x < -1.25) & (x > -1.75)] = 11
    r[(x <= -1.75) & (x >= -2.5)] = 12
    r[(x < -2.5) & (x > -3.5)] = 13
    r[(x <= -3.5) & (x >= -5.0)] = 14
    r[x < -5.0] = 15
    return (r[:, ::2] + r[:, 1::2] * 16).astype(np.uint8)


def recip(v):
    with np.errstate(divide="ignore"):
        return np.where(v == 0, F32(0), F32(1) / v).astype(F32)


def ref_fp4_quant(x, global_scale):
    m, n = x.shape
    blocks = x.astype(F32).reshape(m, n // 16, 16)
    vec_max = np.abs(blocks).max(axis=-1, keepdims=True).astype(F32)
    scale = (global_scale * (vec_max * F32(1.0 / 6.0))).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        sf = scale.astype(ml_dtypes.float8_e4m3fn)
    scale = sf.astype(F32)
    out_s = recip((scale * recip(np.array(global_scale, dtype=F32))).astype(F32))
    scaled = (blocks * out_s).astype(F32)
    clipped = np.clip(scaled, F32(-6), F32(6)).reshape(m, n)
    return cast_to_fp4x2(clipped), sf.view(np.uint8).reshape(m, n // 16)


def swizzle(sf_linear):
    m, k = sf_linear.shape
    mp, kp = (m + 127) // 128 * 128, (k + 3) // 4 * 4
    pad = np.zeros((mp, kp), dtype=np.uint8)
    pad[:m, :k] = sf_linear
    # memory order [mTile][kTile][m%32][(m%128)/32][k%4]
    return pad.reshape(mp // 128, 4, 32, kp // 4, 4).transpose(0, 3, 2, 1, 4).reshape(mp, kp)


def golden(name, rng, rows, cols, dtype, layout, pass_global):
    x = rng.standard_normal((rows, cols)).astype(F32)
    outliers = rng.integers(0, rows * cols, rows * cols // 97 + 1)
    x.reshape(-1)[outliers] *= 20.0
    x = x.astype(dtype)
    xf = x.astype(F32)
    global_scale = (F32(448.0 * 6.0) / np.abs(xf).max()).astype(F32)
    q, sf = ref_fp4_quant(xf, global_scale)
    if layout == "swizzled128x4":
        sf = swizzle(sf)
    tensors = {"x": x, "expected.x_fp4": q, "expected.sf": sf,
               "expected.global_scale": np.array([global_scale], dtype=F32)}
    if pass_global:
        tensors["global_scale"] = np.array([global_scale], dtype=F32)
    save(name, tensors, {
        "op": "nvfp4_quantize",
        "params": params(mode="exact", layout=layout),
        "tol.x_fp4": "exact",
        "tol.sf": "exact",
        "tol.global_scale": "exact",
        "source": "numpy port of FlashInfer tests/test_helpers/utils_fp4.ref_fp4_quant",
    })


rng = np.random.default_rng(4096)
golden("nvfp4_quantize-flashinfer-f32-linear", rng, 64, 256, F32, "linear", True)
golden("nvfp4_quantize-flashinfer-bf16-linear", rng, 32, 512, ml_dtypes.bfloat16, "linear", False)
golden("nvfp4_quantize-flashinfer-f32-swizzled-odd", rng, 77, 160, F32, "swizzled128x4", True)
