"""Goldens for the format ops: `cast` against ml_dtypes / numpy, `philox` against Random123.

    python3 -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install numpy ml_dtypes
    /tmp/gvenv/bin/python tools/gen_goldens_formats.py

Casts: ml_dtypes `float8_e4m3fn` is the NON-saturating cast (overflow and inf -> NaN), so the
e4m3 golden runs `cast` with `saturate=false`. ml_dtypes' `float4_e2m1fn` maps NaN to a zero
code (0x8 / 0x0) where duet maps it to 0x7 (+6, the `.satfinite` reading; see
reference/src/num/e2m1.rs), so NaN is left out of the e2m1 golden; everything else
(ties to even, saturation of overflow and inf to +-6, signed zeros) is compared bit for bit.
"""

import ml_dtypes
import numpy as np

from goldens_common import log_uniform, params, save

rng = np.random.default_rng(20260131)

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504.0, 65520.0, 65519.99, 448.0, 464.0,
     465.0, 480.0, 1e-8, -1e-8, 6.0e-8, 2.0**-24, 2.0**-25, 3.0 * 2.0**-26, 2.0**-133, -2.0**-149,
     3.4e38, -3.4e38, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0,
     -5.0, 7.0, 2.0**-10, 2.0**-9, 3 * 2.0**-11],
    dtype=np.float32,
)


def cast_golden(name, to, x, expected, extra=None, source=""):
    p = {"to": to}
    p.update(extra or {})
    save(
        name,
        {"x": x, "expected.out": expected},
        {"op": "cast", "params": params(**p), "tol.out": "exact", "source": source},
    )


# bf16: random over the whole f32 range (subnormals included) + specials + exact ties.
ties = (1.0 + (2 * np.arange(1, 200) + 1) * 2.0**-8).astype(np.float32)  # halfway points
x = np.concatenate([SPECIALS, ties, log_uniform(rng, 3000, -140, 127.9)]).astype(np.float32)
cast_golden("cast-ml_dtypes-bf16", "bf16", x, x.astype(ml_dtypes.bfloat16),
            source="ml_dtypes " + ml_dtypes.__version__ + " astype(bfloat16)")

# f16 (numpy's IEEE conversion): around the f16 range, subnormals and overflow.
ties16 = (1.0 + (2 * np.arange(1, 200) + 1) * 2.0**-11).astype(np.float32)
x = np.concatenate([SPECIALS, ties16, log_uniform(rng, 3000, -27, 17)]).astype(np.float32)
with np.errstate(over="ignore"):
    cast_golden("cast-numpy-f16", "f16", x, x.astype(np.float16),
                source="numpy " + np.__version__ + " astype(float16)")

# e4m3fn, non-saturating (ml_dtypes): every halfway point between adjacent E4M3 values.
grid = np.arange(0, 0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
mid = ((grid[:-1].astype(np.float64) + grid[1:]) / 2).astype(np.float32)
x = np.concatenate([SPECIALS, grid, mid, -mid, log_uniform(rng, 2000, -12, 9.5)]).astype(np.float32)
cast_golden("cast-ml_dtypes-e4m3", "e4m3", x, x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8),
            extra={"saturate": "false"},
            source="ml_dtypes " + ml_dtypes.__version__ + " astype(float8_e4m3fn)")

# e2m1 (one code per byte), NaN left out (module doc).
g4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
mid4 = ((g4[:-1] + g4[1:]) / 2).astype(np.float32)
x = np.concatenate([SPECIALS, g4, -g4, mid4, -mid4, np.nextafter(mid4, 0), np.nextafter(mid4, 9),
                    log_uniform(rng, 2000, -4, 3.5)]).astype(np.float32)
x = x[~np.isnan(x)]
cast_golden("cast-ml_dtypes-e2m1", "e2m1", x, x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8),
            source="ml_dtypes " + ml_dtypes.__version__ + " astype(float4_e2m1fn), NaN excluded")

# Philox-4x32: Random123 kat_vectors (zeros, ones, pi digits) for 7 and 10 rounds.
KAT = {
    7: [0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48,
        0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662,
        0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a],
    10: [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8,
         0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd,
         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
}
counter = np.array([[0, 0, 0, 0], [0xFFFFFFFF] * 4,
                    [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344]], dtype=np.uint32)
key = np.array([[0, 0], [0xFFFFFFFF] * 2, [0xa4093822, 0x299f31d0]], dtype=np.uint32)
for rounds, out in KAT.items():
    save(f"philox-random123-r{rounds}",
         {"counter": counter, "key": key,
          "expected.out": np.array(out, dtype=np.uint32).reshape(3, 4)},
         {"op": "philox", "params": params(rounds=rounds), "tol.out": "exact",
          "source": "Random123 kat_vectors philox4x32_" + str(rounds)})
