pub fn classify_header_line(_l: &str) -> Option<()> { None }
