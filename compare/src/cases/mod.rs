//! Every case of the table, one module per op (the same name as the op).

use crate::case::Case;

// (case modules are declared here, one line each)
pub mod moe;

/// Every case, in table order.
pub fn all() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    // (one `v.extend(module::cases());` line per op)
    v.extend(moe::cases());
    v.retain(|_| true);
    v
}
