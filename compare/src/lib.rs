//! duet's compare layer: tolerances and mismatch reports, seeded input generators, the case
//! table and the check runner that diffs implementations against the reference.

pub mod case;
pub mod cases;
pub mod check;
pub mod gen;
pub mod tolerance;

pub use case::{Case, CaseDef, Variant};
pub use check::{Backend, Row};
pub use tolerance::{compare, Report, Tolerance};
