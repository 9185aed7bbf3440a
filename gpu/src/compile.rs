//! NVRTC: compiles the embedded `gpu/kernels/*.cu` sources for one architecture.
//!
//! Each kernel file is compiled as `common.cuh` + the file, joined textually (NVRTC has no
//! include path by default) with `#line` directives so NVRTC's log names `common.cuh(L)` or
//! `<op>.cu(L)` and the real line. Output is a CUBIN for the real architecture (`sm_90a` on the
//! H200), built with `-lineinfo` (ncu maps back to source) and `--fmad=false` (the CPU reference
//! does not contract `a*b+c`; kernels that want an FMA write `fmaf` explicitly, and the
//! reference mirrors it). Results are cached in memory per (source hash, arch) and, when
//! `DUET_KERNEL_CACHE=<dir>` is set, on disk as `<dir>/<op>-<hash>-<arch>.cubin`.
//! This module needs NVRTC but no GPU, so CI compiles every kernel.

use crate::GpuError;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// The shared header prepended to every kernel source.
pub const COMMON: &str = include_str!("../kernels/common.cuh");

/// One embedded kernel source file.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// File stem: `gpu/kernels/<name>.cu` (also the op name where the file implements one op).
    pub name: &'static str,
    pub src: &'static str,
}

/// Every kernel file, in `gpu/kernels/`.
pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "noaux_tc_router",
        src: include_str!("../kernels/noaux_tc_router.cu"),
    },
    KernelSource {
        name: "nvfp4",
        src: include_str!("../kernels/nvfp4.cu"),
    },
    KernelSource {
        name: "nvfp4_fused",
        src: include_str!("../kernels/nvfp4_fused.cu"),
    },
    KernelSource {
        name: "philox",
        src: include_str!("../kernels/philox.cu"),
    },
    KernelSource {
        name: "rcp_measure",
        src: include_str!("../kernels/rcp_measure.cu"),
    },
    KernelSource {
        name: "bench_copy",
        src: include_str!("../kernels/bench_copy.cu"),
    },
    KernelSource {
        name: "causal_conv1d",
        src: include_str!("../kernels/causal_conv1d.cu"),
    },
    KernelSource {
        name: "ssd_chunk_scan",
        src: include_str!("../kernels/ssd_chunk_scan.cu"),
    },
    KernelSource {
        name: "selective_state_update",
        src: include_str!("../kernels/selective_state_update.cu"),
    },
    KernelSource {
        name: "ssu_multi_token",
        src: include_str!("../kernels/ssu_multi_token.cu"),
    },
    KernelSource {
        name: "moe",
        src: include_str!("../kernels/moe.cu"),
    },
    KernelSource {
        name: "model_ops",
        src: include_str!("../kernels/model_ops.cu"),
    },
];

/// Looks a kernel file up by name.
pub fn source(name: &str) -> Result<KernelSource, GpuError> {
    SOURCES
        .iter()
        .copied()
        .find(|k| k.name == name)
        .ok_or_else(|| GpuError::NoKernel(name.into()))
}

/// Kernel definitions of a source text that do not begin with `DUET_PDL_ENTRY();` (or
/// `DUET_PDL_DEFERRED();`: the kernel waits later, before its first dependent access), as the
/// text from `__global__` to the body's opening brace (declarations and `//` comment lines
/// are skipped). Empty: every kernel of the text is safe to launch with a programmatic
/// dependency on the kernel before it (common.cuh).
pub fn kernels_without_pdl_entry(src: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let mut i = 0;
    while let Some(j) = src[i..].find("__global__").map(|j| i + j) {
        i = j + "__global__".len();
        let line_start = src[..j].rfind('\n').map_or(0, |p| p + 1);
        if src[line_start..j].trim_start().starts_with("//") {
            continue;
        }
        let Some(brace) = src[j..].find('{').map(|b| j + b) else {
            break;
        };
        if src[j..brace].contains(';') {
            continue; // a declaration
        }
        let body = src[brace + 1..].trim_start_matches([' ', '\t', '\n', '\r', '\\']);
        if !body.starts_with("DUET_PDL_ENTRY();") && !body.starts_with("DUET_PDL_DEFERRED();") {
            bad.push(
                src[j..brace]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    bad
}

/// Whether every kernel of file `name` begins with `DUET_PDL_ENTRY();` (a file that has none
/// is not).
pub fn pdl_ready(name: &str) -> bool {
    static READY: OnceLock<Vec<(&'static str, bool)>> = OnceLock::new();
    READY
        .get_or_init(|| {
            SOURCES
                .iter()
                .map(|k| {
                    (
                        k.name,
                        k.src.contains("__global__") && kernels_without_pdl_entry(k.src).is_empty(),
                    )
                })
                .collect()
        })
        .iter()
        .any(|&(n, ok)| n == name && ok)
}

/// The text NVRTC compiles: the common header then the file, with `#line` markers.
pub fn full_source(k: &KernelSource) -> String {
    format!(
        "#line 1 \"common.cuh\"\n{}\n#line 1 \"{}.cu\"\n{}\n",
        COMMON, k.name, k.src
    )
}

/// NVRTC options for `arch` (e.g. `sm_90a`), plus a `-D` for each define in `DUET_NVRTC_DEFINES`.
pub fn options(arch: &str) -> Result<Vec<String>, GpuError> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "-lineinfo".into(),
        "--std=c++17".into(),
        "--fmad=false".into(),
        "-default-device".into(),
    ];
    if let Ok(v) = std::env::var("DUET_NVRTC_DEFINES") {
        o.extend(parse_defines(&v)?.into_iter().map(|d| format!("-D{d}")));
    }
    Ok(o)
}

/// `DUET_NVRTC_DEFINES`: comma-separated `NAME` or `NAME=VALUE` (an A/B switch of a kernel
/// file without a new kernel entry point; session 37 switched SSD's stage-load thread map this
/// way). The defines are part of the cache key. Anything else is an error naming the entry.
pub fn parse_defines(v: &str) -> Result<Vec<String>, GpuError> {
    let mut out = Vec::new();
    for d in v.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (name, value) = d.split_once('=').unwrap_or((d, ""));
        let name_ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let value_ok = value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
        if !name_ok || !value_ok {
            return Err(GpuError::Unsupported(format!(
                "DUET_NVRTC_DEFINES entry '{d}' is not NAME or NAME=VALUE (letters, digits, _; \
                 values may also have . + -); e.g. DUET_NVRTC_DEFINES=MY_SWITCH=2,OTHER"
            )));
        }
        out.push(d.to_string());
    }
    Ok(out)
}

/// FNV-1a 64: a stable hash for cache keys (std's hasher is not stable across releases).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Whether the NVRTC library can be loaded (cudarc would panic on first use otherwise).
pub fn nvrtc_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library names cudarc knows; no NVRTC call is made.
    *OK.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// NVRTC's version, e.g. (13, 0).
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); the out-pointers are valid locals.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| GpuError::Nvrtc(format!("nvrtcVersion failed: {e:?}")))?;
    Ok((major, minor))
}

fn ensure_nvrtc() -> Result<(), GpuError> {
    if nvrtc_available() {
        Ok(())
    } else {
        Err(GpuError::Nvrtc(
            "cannot load the NVRTC library (libnvrtc.so / libnvrtc.so.13); install it \
             (`. scripts/nvrtc-env.sh` installs NVRTC 13.0 into .nvrtc/ and sets LD_LIBRARY_PATH) \
             or put the CUDA toolkit's lib64 folder on LD_LIBRARY_PATH"
                .into(),
        ))
    }
}

type Cache = Mutex<HashMap<(u64, String), Arc<Vec<u8>>>>;

fn cache() -> &'static Cache {
    static C: OnceLock<Cache> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The cache key of a full source compiled with `opts`.
fn source_hash(src: &str, opts: &[String]) -> u64 {
    fnv1a(format!("{src}\0{}", opts.join("\0")).as_bytes())
}

/// Compiles kernel file `name` for `arch` and returns its CUBIN (cached).
pub fn compile(name: &str, arch: &str) -> Result<Arc<Vec<u8>>, GpuError> {
    compile_cached(name, arch, false)
}

/// [`compile`] bypassing both caches (memory and `DUET_KERNEL_CACHE`), whose entries are then
/// replaced with the result: the loader's way out when a cached cubin does not load.
pub fn compile_fresh(name: &str, arch: &str) -> Result<Arc<Vec<u8>>, GpuError> {
    compile_cached(name, arch, true)
}

fn compile_cached(name: &str, arch: &str, fresh: bool) -> Result<Arc<Vec<u8>>, GpuError> {
    let k = source(name)?;
    let src = full_source(&k);
    let opts = options(arch)?;
    let hash = source_hash(&src, &opts);
    let key = (hash, arch.to_string());
    if !fresh {
        if let Some(c) = cache().lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
    }
    let disk = std::env::var_os("DUET_KERNEL_CACHE")
        .map(|d| std::path::PathBuf::from(d).join(format!("{name}-{hash:016x}-{arch}.cubin")));
    if let (Some(p), false) = (&disk, fresh) {
        if let Ok(bytes) = std::fs::read(p) {
            let c = Arc::new(bytes);
            if let Ok(mut m) = cache().lock() {
                m.insert(key, c.clone());
            }
            return Ok(c);
        }
    }
    let cubin = Arc::new(compile_uncached(&k, &src, &opts)?);
    if let Some(p) = &disk {
        // A cache write failure is not an error: the next run compiles again.
        let _ = p.parent().map(std::fs::create_dir_all);
        let _ = std::fs::write(p, cubin.as_slice());
    }
    if let Ok(mut m) = cache().lock() {
        m.insert(key, cubin.clone());
    }
    Ok(cubin)
}

/// Compiles an arbitrary source (not cached): for tests of the error path.
pub fn compile_source(k: &KernelSource, arch: &str) -> Result<Vec<u8>, GpuError> {
    compile_uncached(k, &full_source(k), &options(arch)?)
}

/// Runs NVRTC once; on failure returns the log with the offending source lines quoted.
fn compile_uncached(k: &KernelSource, src: &str, opts: &[String]) -> Result<Vec<u8>, GpuError> {
    compile_with_log(k, src, opts).map(|(cubin, _)| cubin)
}

/// Per-kernel resources reported by ptxas for one kernel file (no GPU needed: NVRTC compiles to
/// CUBIN on the host).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct KernelResources {
    pub kernel: String,
    pub registers: u32,
    pub spill_stores_bytes: u32,
    pub spill_loads_bytes: u32,
    pub stack_bytes: u32,
    pub smem_bytes: u32,
    /// ptxas serialized the kernel's wgmma's (C7515: a non-wgmma instruction defines an
    /// accumulator register while a wgmma group is pending): every wgmma then waits for the
    /// previous one.
    pub wgmma_serialized: bool,
}

/// Compiles kernel file `name` for `arch` with `--ptxas-options=-v` and parses ptxas' report:
/// registers, spill bytes, stack frame and static shared memory of every kernel in the file.
pub fn resources(name: &str, arch: &str) -> Result<Vec<KernelResources>, GpuError> {
    let k = SOURCES
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| GpuError::Unsupported(format!("no kernel file '{name}'")))?;
    let mut opts = options(arch)?;
    opts.push("--ptxas-options=-v".into());
    let (_, log) = compile_with_log(k, &full_source(k), &opts)?;
    // DUET_PTXAS_LOG=<substring>: print the ptxas lines that mention it (a kernel's name, a
    // warning number) to stderr.
    if let Ok(pat) = std::env::var("DUET_PTXAS_LOG") {
        let mut on = false;
        for l in log.lines() {
            if l.contains("Compiling entry function") {
                on = l.contains(&pat);
            }
            if on || l.contains(&pat) {
                eprintln!("{l}");
            }
        }
    }
    Ok(parse_ptxas_log(&log))
}

/// Parses `ptxas info` lines: "Compiling entry function 'X'", "N bytes stack frame, N bytes spill
/// stores, N bytes spill loads", "Used N registers, ... N bytes smem".
pub fn parse_ptxas_log(log: &str) -> Vec<KernelResources> {
    let num_before = |line: &str, key: &str| -> Option<u32> {
        let i = line.find(key)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<KernelResources> = vec![];
    let mut in_entry = false;
    let serialized: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("wgmma.mma_async instructions are serialized"))
        .filter_map(|l| l.split("in the function '").nth(1)?.split('\'').next())
        .collect();
    for line in log.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + "Compiling entry function '".len()..];
            let name = rest.split('\'').next().unwrap_or_default();
            out.push(KernelResources {
                kernel: name.into(),
                wgmma_serialized: serialized.contains(&name),
                ..Default::default()
            });
            in_entry = true;
        } else if line.contains("Function properties for ") {
            // ptxas also reports every out-of-line device function an entry calls; only the
            // entry's own properties belong to it.
            let f = line
                .split("Function properties for ")
                .nth(1)
                .unwrap_or_default()
                .trim();
            in_entry = out.last().is_some_and(|c| c.kernel == f);
        } else if let Some(cur) = out.last_mut().filter(|_| in_entry) {
            if line.contains("bytes stack frame") {
                cur.stack_bytes = num_before(line, "bytes stack frame").unwrap_or(0);
                cur.spill_stores_bytes = num_before(line, "bytes spill stores").unwrap_or(0);
                cur.spill_loads_bytes = num_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                cur.registers = num_before(line, "registers").unwrap_or(0);
                cur.smem_bytes = num_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

fn compile_with_log(
    k: &KernelSource,
    src: &str,
    opts: &[String],
) -> Result<(Vec<u8>, String), GpuError> {
    use cudarc::nvrtc::sys;
    ensure_nvrtc()?;
    let c_src = CString::new(src).map_err(|_| GpuError::Compile {
        kernel: k.name.into(),
        log: "source contains a NUL byte".into(),
    })?;
    let c_name = CString::new(format!("{}.cu", k.name)).unwrap_or_default();
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).unwrap_or_default())
        .collect();
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the program; the
    // program is destroyed on every path below.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            c_src.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
        .result()
        .map_err(|e| GpuError::Nvrtc(format!("nvrtcCreateProgram({}): {e:?}", k.name)))?;
        let status = sys::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let mut log_size = 0usize;
        let mut log = String::new();
        if sys::nvrtcGetProgramLogSize(prog, &mut log_size) == sys::nvrtcResult::NVRTC_SUCCESS
            && log_size > 1
        {
            let mut buf = vec![0 as c_char; log_size];
            if sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr()) == sys::nvrtcResult::NVRTC_SUCCESS {
                log = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            }
        }
        if status != sys::nvrtcResult::NVRTC_SUCCESS {
            let _ = sys::nvrtcDestroyProgram(&mut prog);
            return Err(GpuError::Compile {
                kernel: k.name.into(),
                log: annotate_log(&log, k),
            });
        }
        let mut size = 0usize;
        let r = sys::nvrtcGetCUBINSize(prog, &mut size);
        if r != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
            let _ = sys::nvrtcDestroyProgram(&mut prog);
            return Err(GpuError::Nvrtc(format!(
                "nvrtcGetCUBINSize({}): {r:?}; options {opts:?} must name a real architecture (sm_XX)",
                k.name
            )));
        }
        let mut cubin = vec![0u8; size];
        let r = sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char);
        let _ = sys::nvrtcDestroyProgram(&mut prog);
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(GpuError::Nvrtc(format!("nvrtcGetCUBIN({}): {r:?}", k.name)));
        }
        Ok((cubin, log))
    }
}

/// Appends the quoted source line after each `file(LINE): error` line of an NVRTC log.
pub fn annotate_log(log: &str, k: &KernelSource) -> String {
    let mut out = String::new();
    for line in log.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some((file, n)) = parse_loc(line) {
            let text = if file == "common.cuh" {
                Some(COMMON)
            } else if file == format!("{}.cu", k.name) {
                Some(k.src)
            } else {
                None
            };
            if let Some(src_line) = text.and_then(|t| t.lines().nth(n.saturating_sub(1))) {
                out.push_str(&format!(
                    "    gpu/kernels/{file}:{n}: {}\n",
                    src_line.trim_end()
                ));
            }
        }
    }
    out
}

fn parse_loc(line: &str) -> Option<(String, usize)> {
    let open = line.find('(')?;
    let close = line[open..].find(')')? + open;
    let n = line[open + 1..close].parse().ok()?;
    if !line[close..].starts_with("):") {
        return None;
    }
    Some((line[..open].trim().to_string(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_engine_kernel_files_are_pdl_safe() {
        // The decode engine's graph (runtime::end_capture with programmatic edges) holds
        // kernels of these files only; every kernel of them must wait at its entry.
        for f in [
            "model_ops",
            "causal_conv1d",
            "noaux_tc_router",
            "selective_state_update",
            // not the engine's: the MoE layer bench's programmatic graphs (session 32)
            "moe",
        ] {
            let k = source(f).unwrap();
            assert_eq!(
                kernels_without_pdl_entry(k.src),
                Vec::<String>::new(),
                "{f}"
            );
            assert!(pdl_ready(f), "{f}");
        }
        // A file with one kernel lacking it is not; one without kernels is not either.
        assert!(!pdl_ready("nvfp4"));
        assert!(!pdl_ready("no_such_file"));
        let src = "// __global__ void in_a_comment() {}\n\
                   extern \"C\" __global__ void declared(int a);\n\
                   extern \"C\" __global__ void ok(int a) {\n    DUET_PDL_ENTRY();\n}\n\
                   #define K(N) \\\n    extern \"C\" __global__ void N(int a) { \\\n        DUET_PDL_ENTRY(); \\\n    }\n\
                   extern \"C\" __global__ void __launch_bounds__(256) late(int* p) {\n    p[0] = 1;\n    DUET_PDL_ENTRY();\n}\n";
        assert_eq!(
            kernels_without_pdl_entry(src),
            vec!["__global__ void __launch_bounds__(256) late(int* p)".to_string()]
        );
    }

    #[test]
    fn log_annotation_quotes_the_line() {
        let k = KernelSource {
            name: "x",
            src: "int a;\nint b = nope;\n",
        };
        let log = "x.cu(2): error: identifier \"nope\" is undefined\n";
        let a = annotate_log(log, &k);
        assert!(a.contains("gpu/kernels/x.cu:2: int b = nope;"), "{a}");
        assert_eq!(
            parse_loc("common.cuh(10): warning: w"),
            Some(("common.cuh".into(), 10))
        );
        assert_eq!(parse_loc("no location here"), None);
    }

    #[test]
    fn ptxas_report_keeps_called_functions_out_of_the_entry() {
        // Shape of ptxas 13.0's -v report for an entry that calls an out-of-line function.
        let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90a'
ptxas info    : Function properties for k_a
ptxas         .     184 bytes stack frame, 28 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 184 bytes cumulative stack size, 6144 bytes smem
ptxas info    : Compile time = 101.845 ms
ptxas info    : Function properties for _Z12ssu3_exp_adtff
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'k_b' for 'sm_90a'
ptxas info    : Function properties for k_b
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function 'k_b'
";
        let r = parse_ptxas_log(log);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(!r[0].wgmma_serialized && r[1].wgmma_serialized, "{r:?}");
        assert_eq!(
            (r[0].kernel.as_str(), r[0].registers, r[0].stack_bytes),
            ("k_a", 80, 184)
        );
        assert_eq!(
            (
                r[0].spill_stores_bytes,
                r[0].spill_loads_bytes,
                r[0].smem_bytes
            ),
            (28, 20, 6144)
        );
        assert_eq!(
            (r[1].kernel.as_str(), r[1].registers, r[1].stack_bytes),
            ("k_b", 32, 0)
        );
    }

    #[test]
    fn defines_are_checked() {
        assert_eq!(
            parse_defines("SSD_LOAD_MAP=2, FOO,_B=1.5e-3").unwrap(),
            vec!["SSD_LOAD_MAP=2", "FOO", "_B=1.5e-3"]
        );
        assert!(parse_defines("").unwrap().is_empty());
        for bad in ["2X=1", "A B", "X=\"1\"", "X=1;rm", "-DX"] {
            let e = parse_defines(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("NAME=VALUE"), "{bad}: {e}");
        }
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
