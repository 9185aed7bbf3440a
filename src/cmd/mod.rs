pub mod bench;
pub mod check;
pub mod compare;
pub mod e2e;
pub mod ops;
pub mod profile;
pub mod run;
pub mod trace;
