//! Kernel identity: canonical names that join across tools (nsys, ncu, Kineto, c++filt) and
//! versions, at three levels of detail. Names are compared by equality only, never by
//! substring (`_fwd_kernel` is not `_fwd_kernel_stage2`).

use serde::Serialize;

/// How much of a kernel's name identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NameLevel {
    /// Full canonical signature (templates and parameters).
    #[default]
    Full,
    /// Template argument lists folded to `<...>`, parameters kept.
    Template,
    /// Base function name only (no namespace, templates or parameters).
    Base,
}

/// The three canonical forms of one raw kernel name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalName {
    pub full: String,
    pub template: String,
    pub base: String,
}

impl CanonicalName {
    pub fn new(raw: &str) -> Self {
        let full = canonical_full(raw);
        let template = fold_templates(&full);
        let base = base_name(&full);
        CanonicalName {
            full,
            template,
            base,
        }
    }
    pub fn at(&self, level: NameLevel) -> &str {
        match level {
            NameLevel::Full => &self.full,
            NameLevel::Template => &self.template,
            NameLevel::Base => &self.base,
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

const INT_TYPES: [&str; 16] = [
    "int",
    "unsigned int",
    "signed int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
    "short",
    "unsigned short",
    "char",
    "signed char",
    "unsigned char",
    "unsigned",
    "long int",
    "unsigned long int",
    "__int128",
];

/// Canonical full signature.
///
/// * whitespace collapsed; spaces kept only between two identifier characters
///   (`const T2 *` -> `const T2*`, `> >` -> `>>`);
/// * nsys / CUPTI literal casts `(int)4` -> `4`, `(bool)1` -> `true`; c++filt literal suffixes
///   `4u`, `4ul` -> `4`;
/// * `<unnamed>` (ncu), `{anonymous}` -> `(anonymous namespace)`;
/// * c++filt lambdas `{lambda(int)#1}` -> `[lambda(int) (instance 1)]` (nsys style);
/// * a leading `void ` return type is dropped (nsys prints it for template instances only).
pub fn canonical_full(raw: &str) -> String {
    let mut s = raw.trim().to_string();
    s = s.replace("<unnamed>", "(anonymous namespace)");
    s = s.replace("{anonymous}", "(anonymous namespace)");
    s = convert_cxxfilt_lambdas(&s);
    s = strip_literal_casts(&s);
    s = squeeze_spaces(&s);
    s = strip_literal_suffixes(&s);
    if let Some(rest) = s.strip_prefix("void ") {
        s = rest.to_string();
    }
    s
}

fn squeeze_spaces(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0usize;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let prev = out.chars().last();
            let next = chars.get(j).copied();
            if let (Some(p), Some(n)) = (prev, next) {
                if is_word(p) && is_word(n) {
                    out.push(' ');
                }
            }
            i = j;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `{lambda(ARGS)#N}` -> `[lambda(ARGS) (instance N)]`.
fn convert_cxxfilt_lambdas(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find("{lambda(") {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + "{lambda(".len()..];
        // find the matching ')' of the lambda parameter list
        let mut depth = 1i64;
        let mut close = None;
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let converted = close.and_then(|ci| {
            let args = &after[..ci];
            let tail = &after[ci + 1..];
            let tail = tail.strip_prefix('#')?;
            let digits: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
            let tail2 = tail[digits.len()..].strip_prefix('}')?;
            if digits.is_empty() {
                return None;
            }
            Some((format!("[lambda({args}) (instance {digits})]"), tail2))
        });
        match converted {
            Some((text, tail)) => {
                out.push_str(&text);
                rest = tail;
            }
            None => {
                out.push_str("{lambda(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `(int)4` -> `4`, `(unsigned int)7` -> `7`, `(bool)1` -> `true`, `(bool)0` -> `false`.
fn strip_literal_casts(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0usize;
    while i < s.len() {
        if bytes[i] == b'(' {
            if let Some(close_rel) = s[i + 1..].find(')') {
                let ty = s[i + 1..i + 1 + close_rel].trim();
                let after = &s[i + 2 + close_rel..];
                let num: String = after
                    .chars()
                    .enumerate()
                    .take_while(|(k, c)| c.is_ascii_digit() || (*k == 0 && *c == '-'))
                    .map(|(_, c)| c)
                    .collect();
                let has_digit = num.chars().any(|c| c.is_ascii_digit());
                let prev_is_word = out.chars().last().map(is_word).unwrap_or(false);
                if has_digit && !prev_is_word {
                    if ty == "bool" {
                        out.push_str(if num == "0" { "false" } else { "true" });
                        i += 2 + close_rel + num.len();
                        continue;
                    }
                    let ty_norm = squeeze_spaces(ty);
                    if INT_TYPES.contains(&ty_norm.as_str()) {
                        out.push_str(&num);
                        i += 2 + close_rel + num.len();
                        continue;
                    }
                }
            }
        }
        // push one UTF-8 character
        let ch_len = s[i..].chars().next().map(|c| c.len_utf8()).unwrap_or(1);
        out.push_str(&s[i..i + ch_len]);
        i += ch_len;
    }
    out
}

/// c++filt integer literal suffixes: `4u`, `4ul`, `4ull`, `4l`, `4ll` -> `4` when the number is a
/// whole token.
fn strip_literal_suffixes(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0usize;
    while i < chars.len() {
        let c = chars[i];
        let prev_word = i > 0 && is_word(chars[i - 1]);
        if c.is_ascii_digit() && !prev_word {
            let mut j = i;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            let mut k = j;
            while k < chars.len() && k - j < 3 && matches!(chars[k], 'u' | 'U' | 'l' | 'L') {
                k += 1;
            }
            let ends_token = k >= chars.len() || !is_word(chars[k]);
            out.extend(&chars[i..j]);
            if k > j && ends_token {
                i = k;
            } else {
                i = j;
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Fold every outermost template argument list to `<...>`.
pub fn fold_templates(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut depth = 0i64;
    let mut paren = 0i64;
    let mut prev = ' ';
    for c in full.chars() {
        match c {
            '(' if depth == 0 => {
                paren += 1;
                out.push(c);
            }
            ')' if depth == 0 => {
                paren -= 1;
                out.push(c);
            }
            '<' if !(is_operator_context(&out) || depth == 0 && prev == '-') => {
                if depth == 0 {
                    out.push_str("<...>");
                }
                depth += 1;
            }
            '>' if depth > 0 => {
                depth -= 1;
            }
            _ => {
                if depth == 0 {
                    out.push(c);
                }
            }
        }
        prev = c;
    }
    let _ = paren;
    out
}

fn is_operator_context(out: &str) -> bool {
    out.ends_with("operator") || out.ends_with("operator<")
}

/// Base function name: no return type, namespace, template arguments or parameters.
pub fn base_name(full: &str) -> String {
    let t = full.trim();
    if t.starts_with("_Z") {
        if let Some(b) = mangled_base(t) {
            return b;
        }
    }
    // keep only depth-0 text, dropping (...) <...> [...] groups
    let mut top = String::with_capacity(t.len());
    let mut depth = 0i64;
    for c in t.chars() {
        match c {
            '(' | '<' | '[' => {
                depth += 1;
                if depth == 1 {
                    top.push('\u{1}');
                }
            }
            ')' | '>' | ']' => {
                depth = (depth - 1).max(0);
            }
            _ => {
                if depth == 0 {
                    top.push(c);
                }
            }
        }
    }
    // the name is the last `::`-separated component of the last space-separated word
    let word = top
        .split(' ')
        .rfind(|w| !w.trim_matches('\u{1}').is_empty())
        .unwrap_or("");
    let comp = word
        .split("::")
        .map(|p| p.trim_matches('\u{1}'))
        .filter(|p| !p.is_empty())
        .last()
        .unwrap_or("");
    let comp = comp.split('\u{1}').next().unwrap_or("");
    if comp.is_empty() {
        t.to_string()
    } else {
        comp.to_string()
    }
}

/// The last source-name of an Itanium-mangled name (`_ZN2at6native18elementwise_kernelI...` ->
/// `elementwise_kernel`). Minimal: enough to get a base name for grouping.
fn mangled_base(m: &str) -> Option<String> {
    let b = m.as_bytes();
    let mut i = 2usize;
    if b.get(i) == Some(&b'N') {
        i += 1;
    }
    while matches!(b.get(i), Some(b'K') | Some(b'V') | Some(b'r') | Some(b'L')) {
        i += 1;
    }
    if b.get(i) == Some(&b'S') && b.get(i + 1) == Some(&b't') {
        i += 2;
    }
    let mut last = None;
    loop {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            break;
        }
        let len: usize = m[start..i].parse().ok()?;
        let end = i.checked_add(len)?;
        if end > b.len() {
            return None;
        }
        last = Some(m.get(i..end)?.to_string());
        i = end;
    }
    last
}

/// Range names from PyTorch's NVTX emission carry per-call suffixes (`aten::mm, op_id = 12`,
/// `aten::add, seq = 3`); drop them so calls of the same op group together.
pub fn canonical_range_name(raw: &str) -> &str {
    let mut s = raw.trim();
    // PyTorch numbers its steps (`ProfilerStep#1011`); runs being compared rarely share numbers
    if let Some(rest) = s.strip_prefix("ProfilerStep#") {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            return "ProfilerStep#*";
        }
    }
    for marker in [", op_id = ", ", seq = ", ", sizes = "] {
        if let Some(pos) = s.find(marker) {
            s = &s[..pos];
        }
    }
    s.trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_casts_and_whitespace() {
        let nsys = "void vadd<(int)1, float4>(const T2 *, const T2 *, T2 *, int)";
        let filt = "void vadd<1, float4>(T2 const*, T2 const*, T2*, int)";
        assert_eq!(
            canonical_full(nsys),
            "vadd<1,float4>(const T2*,const T2*,T2*,int)"
        );
        assert_ne!(canonical_full(filt), canonical_full(nsys)); // const placement differs
        assert_eq!(canonical_full("k<(unsigned int)4u>"), "k<4>");
        assert_eq!(canonical_full("k<4u, 8ul>"), "k<4,8>");
        assert_eq!(canonical_full("k<(bool)1, (bool)0>"), "k<true,false>");
        assert_eq!(canonical_full("k< float4 >  ( int )"), "k<float4>(int)");
        assert_eq!(canonical_full("k<a<b> >"), "k<a<b>>");
        assert_eq!(canonical_full("float4"), "float4");
    }

    #[test]
    fn anonymous_and_lambda_styles_join() {
        let ncu = "void at::<unnamed>::k<float>(int)";
        let nsys = "void at::(anonymous namespace)::k<float>(int)";
        assert_eq!(canonical_full(ncu), canonical_full(nsys));
        let filt = "void f<g(int)::{lambda(int, int)#1}>(int)";
        let nsys = "void f<g(int)::[lambda(int, int) (instance 1)]>(int)";
        assert_eq!(canonical_full(filt), canonical_full(nsys));
    }

    #[test]
    fn levels() {
        let c = CanonicalName::new("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)");
        assert_eq!(c.base, "vectorized_elementwise_kernel");
        assert_eq!(
            c.template,
            "at::native::vectorized_elementwise_kernel<...>(int,at::native::CUDAFunctor_add<...>,at::detail::Array<...>)"
        );
        assert_eq!(
            CanonicalName::new("saxpy(double *, double *, double *, double, int)").base,
            "saxpy"
        );
        assert_eq!(
            CanonicalName::new("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN").base,
            "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
        );
        assert_eq!(
            CanonicalName::new("_ZN2at6native18elementwise_kernelILi128ELi2EEEviT1_").base,
            "elementwise_kernel"
        );
        assert_eq!(CanonicalName::new("_Z5saxpyPfS_fi").base, "saxpy");
        let lam = CanonicalName::new("void clover::par_ranged2d_kernel<PdV_kernel(bool, int)::[lambda(int, int) (instance 2)]>(clover::Range2d, T1)");
        assert_eq!(lam.base, "par_ranged2d_kernel");
    }

    #[test]
    fn no_substring_identity() {
        let a = CanonicalName::new("_fwd_kernel");
        let b = CanonicalName::new("_fwd_kernel_stage2");
        assert_ne!(a.full, b.full);
        assert_ne!(a.base, b.base);
    }

    #[test]
    fn range_suffixes() {
        assert_eq!(
            canonical_range_name("aten::empty, op_id = 990346"),
            "aten::empty"
        );
        assert_eq!(
            canonical_range_name("aten::add, seq = 3, sizes = [[1]]"),
            "aten::add"
        );
        assert_eq!(canonical_range_name("step"), "step");
        assert_eq!(canonical_range_name("ProfilerStep#1011"), "ProfilerStep#*");
        assert_eq!(canonical_range_name("ProfilerStep#x"), "ProfilerStep#x");
    }
}
