//! Properties of the CPU model on seeded random `tiny`-preset weights (no golden needed):
//! token-by-token decode (causal_conv1d_update + selective_state_update + KV cache) equals the
//! one-shot prefill (causal_conv1d_fn + ssd_chunk_scan), a prefill split in chunks equals the
//! one-shot prefill, and speculative decoding with MTP drafts emits exactly the greedy tokens.

use proptest::prelude::*;
use reference::model::{Model, Pass};

fn max_rel(a: &[f32], b: &[f32]) -> f64 {
    let num = a
        .iter()
        .zip(b)
        .fold(0f64, |m, (x, y)| m.max((*x as f64 - *y as f64).abs()));
    let den = a.iter().fold(0f64, |m, x| m.max((*x as f64).abs()));
    num / den
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn decode_and_chunked_prefill_equal_one_shot_prefill(
        seed in 0u64..1000,
        toks in prop::collection::vec(0u32..512, 3..28),
        split in 1usize..27,
        pattern in prop::sample::select(vec!["MEM*EM-E", "M*", "*M-E", "MM"]),
    ) {
        let m = Model::preset("tiny", Some(pattern), None, seed).expect("preset");
        let v = m.cfg.vocab_size;
        let t = toks.len();
        let p = split.min(t - 1);
        let full = m.forward(&toks, None, Pass::Prefill, false).expect("prefill");
        // Decode from a prefill of p tokens.
        let mut cache = m.new_cache();
        m.forward(&toks[..p], Some(&mut cache), Pass::Prefill, false).expect("prefill p");
        for (i, &tk) in toks[p..].iter().enumerate() {
            let o = m.forward(&[tk], Some(&mut cache), Pass::Decode, false).expect("decode");
            let row = &full.logits[(p + i) * v..(p + i + 1) * v];
            let e = max_rel(row, &o.logits);
            prop_assert!(e < 1e-4, "decode row {}: max rel {e}", p + i);
        }
        // Two prefill chunks.
        let mut cache = m.new_cache();
        let a = m.forward(&toks[..p], Some(&mut cache), Pass::Prefill, false).expect("chunk 1");
        let b = m.forward(&toks[p..], Some(&mut cache), Pass::Prefill, false).expect("chunk 2");
        let mut both = a.logits;
        both.extend_from_slice(&b.logits);
        let e = max_rel(&full.logits, &both);
        prop_assert!(e < 1e-4, "chunked prefill: max rel {e}");
    }

    #[test]
    fn speculative_decoding_emits_the_greedy_tokens(
        seed in 0u64..1000,
        toks in prop::collection::vec(0u32..512, 1..12),
        k in 1usize..4,
        n_new in 1usize..10,
    ) {
        let m = Model::preset("tiny", None, None, seed).expect("preset");
        let greedy = m.generate_greedy(&toks, n_new).expect("greedy");
        let s = m.generate_speculative(&toks, n_new, k).expect("speculative");
        prop_assert_eq!(&s.tokens, &greedy);
        prop_assert!(s.accepted.iter().all(|&j| j <= k));
    }
}
