//! Line-oriented CSV reading shared by the nsys stats and ncu readers: files mix CSV with
//! banners, NOTICE lines, `==PROF==` lines and program output, so records are split by hand
//! (RFC 4180 quoting, minimal or full) from a streamed line reader.

use crate::error::{Result, TraceError};
use std::io::BufRead;
use std::path::Path;

/// Progress reporting for line readers: raw bytes read so far, drawn every few thousand lines.
pub struct Ticker {
    pub bar: crate::progress::Progress,
    pub counter: std::rc::Rc<std::cell::Cell<u64>>,
}

/// Reads logical lines (a quoted field may span physical lines) as UTF-8.
pub struct Lines<R: BufRead> {
    r: R,
    path: std::path::PathBuf,
    gz: bool,
    pub line_no: u64,
    buf: Vec<u8>,
    ticker: Option<Ticker>,
}

impl<R: BufRead> Lines<R> {
    pub fn new(r: R, path: &Path, gz: bool) -> Self {
        Lines {
            r,
            path: path.to_path_buf(),
            gz,
            line_no: 0,
            buf: Vec::new(),
            ticker: None,
        }
    }

    pub fn with_ticker(mut self, t: Option<Ticker>) -> Self {
        self.ticker = t;
        self
    }

    fn physical(&mut self) -> Result<Option<String>> {
        self.buf.clear();
        let n = self
            .r
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| crate::detect::stream_error(&self.path, self.gz, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        if self.line_no.is_multiple_of(8192) {
            if let Some(t) = &self.ticker {
                t.bar.set(t.counter.get());
            }
        }
        while matches!(self.buf.last(), Some(b'\n') | Some(b'\r')) {
            self.buf.pop();
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Ok(Some(s.to_string())),
            Err(e) => Err(TraceError::csv(
                &self.path,
                self.line_no,
                format!(
                    "not valid UTF-8 (bad byte at column {}); CSV exports must be UTF-8",
                    e.valid_up_to() + 1
                ),
            )),
        }
    }

    /// Next logical line: physical lines are joined while a quoted field is open.
    pub fn next_line(&mut self) -> Result<Option<String>> {
        let Some(mut line) = self.physical()? else {
            return Ok(None);
        };
        let mut guard = 0;
        while quotes_open(&line) && guard < 10_000 {
            match self.physical()? {
                Some(more) => {
                    line.push('\n');
                    line.push_str(&more);
                }
                None => break,
            }
            guard += 1;
        }
        Ok(Some(line))
    }
}

fn quotes_open(line: &str) -> bool {
    line.bytes().filter(|&b| b == b'"').count() % 2 == 1
}

/// Split one CSV record. Handles `"a ""quoted"" b"` and unquoted fields.
pub fn split(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut in_q = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        if in_q {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    cur.push('"');
                    chars.next();
                } else {
                    in_q = false;
                }
            } else {
                cur.push(c);
            }
        } else {
            match c {
                '"' if cur.is_empty() && !was_quoted => {
                    in_q = true;
                    was_quoted = true;
                }
                ',' => {
                    out.push(std::mem::take(&mut cur));
                    was_quoted = false;
                }
                _ => cur.push(c),
            }
        }
    }
    out.push(cur);
    out
}

/// Parse a number as printed by nsys / ncu: thousands separators, `nan`, `-nan`, `n/a`, empty.
/// Returns `None` for text that is not a number, `Some(NaN)` for explicit not-a-number cells.
pub fn parse_num(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() {
        return Some(f64::NAN);
    }
    let lower = t.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "nan" | "-nan" | "+nan" | "n/a" | "na" | "-" | "inf" | "-inf" | "(!)" | "nan%"
    ) {
        return Some(f64::NAN);
    }
    let cleaned: String = t.chars().filter(|&c| c != ',' && c != '_').collect();
    let cleaned = cleaned.trim_end_matches('%');
    cleaned.parse::<f64>().ok()
}

/// `(256, 1, 1)` -> `[256, 1, 1]`.
pub fn parse_dim3(s: &str) -> Option<[u32; 3]> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(')');
    let parts: Vec<u32> = t
        .split(',')
        .map(|p| p.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .ok()?;
    match parts.as_slice() {
        [x] => Some([*x, 1, 1]),
        [x, y] => Some([*x, *y, 1]),
        [x, y, z] => Some([*x, *y, *z]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn split_quoting() {
        assert_eq!(split(r#"a,"b,c",d"#), vec!["a", "b,c", "d"]);
        assert_eq!(split(r#""x ""y"" z","""#), vec![r#"x "y" z"#, ""]);
        assert_eq!(split("1,,3"), vec!["1", "", "3"]);
        assert_eq!(split(r#""0","1","#), vec!["0", "1", ""]);
    }
    #[test]
    fn numbers() {
        assert_eq!(parse_num("16,338,740"), Some(16338740.0));
        assert_eq!(parse_num("3,199,088,678.58"), Some(3199088678.58));
        assert!(parse_num("-nan").is_some_and(f64::is_nan));
        assert!(parse_num("").is_some_and(f64::is_nan));
        assert_eq!(parse_num("NVIDIA H200"), None);
        assert_eq!(parse_dim3("(256, 1, 1)"), Some([256, 1, 1]));
    }
}
