pub mod num;
