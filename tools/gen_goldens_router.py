"""Goldens for `noaux_tc_router`: a numpy port (fp32 throughout) of transformers' noaux_tc
router as written in `DeepseekV3MoE.route_tokens_to_experts` / NemotronH's MoE gate:

    scores = sigmoid(logits)                       # fp32
    choice = scores + e_score_correction_bias
    group_scores = sum of the top-2 of `choice` per group; keep topk_group groups;
    choice of the other groups masked to 0.0
    idx = topk(choice, k); w = scores[idx]
    if norm_topk_prob: w = w / (w.sum() + 1e-20)
    w = w * routed_scaling_factor

torch is not installed here, so the same operations run in numpy float32. torch.topk's order
is unspecified for sorted=False (and differs CPU/GPU), so the (index, weight) pairs are
written sorted by `choice` descending with ties to the lowest index, the order duet defines.
duet runs with `norm_mode=fp32_divide_then_multiply` and `sigmoid=exp` (the transformers
numerics); indices must match exactly, weights to 1e-6 (the sum order of 22 fp32 values and
numpy's exp may differ from duet's in the last bit).

    /tmp/gvenv/bin/python tools/gen_goldens_router.py
"""

import numpy as np

from goldens_common import params, save


def transformers_route(logits, bias, top_k, n_group, topk_group, rsf, norm):
    logits = logits.astype(np.float32)
    scores = (np.float32(1) / (np.float32(1) + np.exp(-logits))).astype(np.float32)
    choice = (scores + bias.astype(np.float32)).astype(np.float32)
    t, e = logits.shape
    if n_group > 1:
        g = choice.reshape(t, n_group, e // n_group)
        top2 = -np.sort(-g, axis=-1)[..., :2]
        group_scores = (top2[..., 0] + top2[..., 1]).astype(np.float32)
        kept = np.argsort(-group_scores, axis=-1, kind="stable")[:, :topk_group]
        mask = np.zeros((t, n_group), dtype=bool)
        np.put_along_axis(mask, kept, True, axis=-1)
        mask = np.repeat(mask, e // n_group, axis=-1)
        choice = np.where(mask, choice, np.float32(0.0)).astype(np.float32)
    # stable argsort of -choice: descending, ties to the lowest index.
    idx = np.argsort(-choice, axis=-1, kind="stable")[:, :top_k]
    w = np.take_along_axis(scores, idx, axis=-1)
    if norm:
        denom = (w.sum(axis=-1, keepdims=True, dtype=np.float32) + np.float32(1e-20)).astype(np.float32)
        w = (w / denom).astype(np.float32)
    w = (w * np.float32(rsf)).astype(np.float32)
    return idx.astype(np.int32), w


def golden(name, rng, t, e, k, n_group=1, topk_group=1, rsf=1.0, norm=True):
    logits = (rng.standard_normal((t, e)) * 2.0).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, e).astype(np.float32)
    idx, w = transformers_route(logits, bias, k, n_group, topk_group, rsf, norm)
    save(
        name,
        {"logits": logits, "bias": bias, "expected.topk_indices": idx, "expected.topk_weights": w},
        {
            "op": "noaux_tc_router",
            "params": params(top_k=k, n_group=n_group, topk_group=topk_group,
                             routed_scaling_factor=rsf, norm_topk_prob=str(norm).lower(),
                             norm_mode="fp32_divide_then_multiply", sigmoid="exp"),
            "tol.topk_indices": "exact",
            "tol.topk_weights": "close:1e-6:1e-6",
            "source": "numpy port of transformers DeepseekV3/NemotronH noaux_tc routing",
        },
    )


rng = np.random.default_rng(5170)
golden("noaux_tc_router-transformers-super", rng, 8, 512, 22, rsf=5.0)
golden("noaux_tc_router-transformers-grouped", rng, 8, 256, 8, n_group=8, topk_group=4, rsf=2.5)
golden("noaux_tc_router-transformers-odd-nonorm", rng, 5, 72, 6, rsf=1.5, norm=False)
