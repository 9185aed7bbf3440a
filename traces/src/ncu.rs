pub fn is_ncu_header(_l: &str) -> bool { false }
