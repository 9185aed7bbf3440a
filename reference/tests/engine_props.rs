//! The decode engine (reference/src/model/engine.rs) on the CPU device against
//! `Model::forward`'s decode, over random layer patterns of the `tiny` preset: every mix and
//! order of Mamba, MoE, attention and MLP blocks, random prompts and prompt lengths. Bit-equal
//! logits at every step (the engine runs the model's ops in the model's order). Bounded case
//! count (CI); `PROPTEST_CASES` raises it.

use proptest::prelude::*;
use reference::model::engine::{CpuDevice, DecodeEngine};
use reference::model::{Model, Pass};

fn pattern() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just('M'), Just('E'), Just('*'), Just('-')],
        1..6,
    )
    .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12),
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_decode_equals_model_decode(
        pat in pattern(),
        seed in 0u64..1000,
        prompt_len in 1usize..6,
        steps in 1usize..4,
    ) {
        let m = Model::preset("tiny", Some(&pat), Some(""), seed).expect("tiny preset");
        let v = m.cfg.vocab_size;
        let prompt: Vec<u32> = (0..prompt_len)
            .map(|i| ((seed as usize * 31 + i * 17) % v) as u32)
            .collect();
        let mut cache = m.new_cache();
        let o = m
            .forward(&prompt, Some(&mut cache), Pass::Prefill, false)
            .expect("prefill");
        let mut eng = DecodeEngine::new(&m, CpuDevice, &cache, steps).expect("engine");
        let mut tk = reference::model::linear::argmax_rows(&o.logits[(prompt_len - 1) * v..], v)[0];
        for step in 0..steps {
            let a = m
                .forward(&[tk], Some(&mut cache), Pass::Decode, false)
                .expect("decode");
            let b = eng.step(tk).expect("engine step");
            let same = a.logits.len() == b.len()
                && a.logits.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
            prop_assert!(same, "pattern {pat}, seed {seed}, step {step}");
            tk = reference::model::linear::argmax_rows(&b, v)[0];
        }
    }
}
