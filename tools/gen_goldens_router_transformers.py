"""Goldens for `noaux_tc_router` from transformers 5.17's own NemotronHTopkRouter (torch, CPU
fp32; transformers/models/nemotron_h/modeling_nemotron_h.py). The module computes
router_logits = F.linear(h, W) in fp32; those logits are the op's `logits` input here.

The grouped file uses biases centred at -0.9. Many kept experts then have a negative choice
score (sigmoid + bias < 0), which is exactly where the masking of dropped groups matters:
NemotronHTopkRouter uses masked_fill(-inf), while DeepseekV3-style routers use 0.0. Indices
must match exactly. Weights must match to 1e-6: the sums of k fp32 values may be ordered
differently. torch.topk(sorted=False) has no defined order, so pairs are written sorted by
choice score descending, ties to the lowest index (duet's order).

    /tmp/tvenv/bin/python tools/gen_goldens_router_transformers.py
"""

import numpy as np
import torch
from transformers import NemotronHConfig
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHTopkRouter

from goldens_common import params, save


def golden(name, seed, tokens, hidden, experts, top_k, n_group, topk_group, bias_mean, rsf):
    g = torch.Generator().manual_seed(seed)
    cfg = NemotronHConfig(hidden_size=hidden, n_routed_experts=experts, num_experts_per_tok=top_k,
                          n_group=n_group, topk_group=topk_group, routed_scaling_factor=rsf,
                          norm_topk_prob=True)
    r = NemotronHTopkRouter(cfg).eval()
    with torch.no_grad():
        r.weight.copy_(torch.randn(experts, hidden, generator=g) / hidden ** 0.5)
        r.e_score_correction_bias.copy_(bias_mean + 0.3 * torch.randn(experts, generator=g))
        h = torch.randn(tokens, hidden, generator=g)
        logits, w, idx = r(h)
    scores = torch.sigmoid(logits) + r.e_score_correction_bias
    order = []
    for t in range(tokens):
        pairs = sorted(zip(idx[t].tolist(), w[t].tolist()), key=lambda p: (-scores[t, p[0]].item(), p[0]))
        order.append(pairs)
    ids = np.array([[p[0] for p in row] for row in order], dtype=np.int32)
    ws = np.array([[p[1] for p in row] for row in order], dtype=np.float32)
    neg = int((scores < 0).sum())
    print(f"{name}: {neg} negative choice scores of {scores.numel()}")
    save(name, {"logits": logits.numpy().astype(np.float32),
                "bias": r.e_score_correction_bias.numpy().astype(np.float32),
                "expected.topk_indices": ids, "expected.topk_weights": ws},
         {"op": "noaux_tc_router",
          "params": params(top_k=top_k, n_group=n_group, topk_group=topk_group, routed_scaling_factor=rsf,
                           norm_topk_prob="true", norm_mode="fp32_divide_then_multiply", sigmoid="exp",
                           group_mask="neg_inf"),
          "tol.topk_indices": "exact", "tol.topk_weights": "close:1e-6:1e-6",
          "source": "transformers 5.17 NemotronHTopkRouter.forward (torch CPU fp32)"})


if __name__ == "__main__":
    golden("noaux_tc_router-transformers-nemotronh-grouped-negbias", 21, tokens=16, hidden=64, experts=32,
           top_k=6, n_group=4, topk_group=2, bias_mean=-0.9, rsf=2.5)
    golden("noaux_tc_router-transformers-nemotronh-super", 22, tokens=6, hidden=128, experts=512,
           top_k=22, n_group=1, topk_group=1, bias_mean=0.0, rsf=5.0)
