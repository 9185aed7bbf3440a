//! PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip.
//!
//! The file is streamed: a small byte scanner finds each event object inside `traceEvents`
//! and only that slice is parsed, so memory stays bounded however large the trace is.

use crate::error::{Result, TraceError};
use crate::model::*;
use crate::progress::Progress;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::cell::Cell;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;

/// Timestamp in µs as integer or fraction, converted to integer ns without going through a
/// lossy f64 for integer inputs.
#[derive(Debug, Clone, Copy)]
struct Micros(i64);

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Micros;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of microseconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Micros, E> {
                Ok(Micros((v as i64).saturating_mul(1000)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Micros, E> {
                Ok(Micros(v.saturating_mul(1000)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Micros, E> {
                Ok(Micros((v * 1000.0).round() as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Micros, E> {
                v.trim()
                    .parse::<f64>()
                    .map(|f| Micros((f * 1000.0).round() as i64))
                    .map_err(|_| E::custom(format!("not a number: {v:?}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// pid / tid / device ids: integers or strings (`"GPU 0"`, `"Spans"`).
#[derive(Debug, Clone, Copy)]
struct Id(Option<i64>);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an id")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Id, E> {
                Ok(Id(Some(v as i64)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Id, E> {
                Ok(Id(Some(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Id, E> {
                Ok(Id(Some(v as i64)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Id, E> {
                let digits: String = v.chars().filter(|c| c.is_ascii_digit()).collect();
                Ok(Id(digits.parse().ok()))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<Id, E> {
                Ok(Id(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[x, y, z]`; anything else (e.g. Triton's `"grid(100,)"` string) is ignored.
#[derive(Debug, Clone, Copy, Default)]
struct Dims(Option<[u32; 3]>);

impl<'de> Deserialize<'de> for Dims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dims;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("launch dimensions")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Dims, A::Error> {
                let mut v = [1u32; 3];
                let mut n = 0usize;
                while let Some(x) = a.next_element::<serde_json::Value>()? {
                    if n < 3 {
                        v[n] = x.as_u64().map(|u| u as u32).unwrap_or(0);
                    }
                    n += 1;
                }
                Ok(Dims(if n == 0 { None } else { Some(v) }))
            }
            fn visit_str<E: de::Error>(self, _v: &str) -> std::result::Result<Dims, E> {
                Ok(Dims(None))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Dims, E> {
                Ok(Dims(Some([v as u32, 1, 1])))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Dims, E> {
                Ok(Dims(Some([v.max(0) as u32, 1, 1])))
            }
            fn visit_f64<E: de::Error>(self, _v: f64) -> std::result::Result<Dims, E> {
                Ok(Dims(None))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<Dims, E> {
                Ok(Dims(None))
            }
            fn visit_bool<E: de::Error>(self, _v: bool) -> std::result::Result<Dims, E> {
                Ok(Dims(None))
            }
            fn visit_map<A: de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Dims, A::Error> {
                while a.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(Dims(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default)]
    device: Option<Id>,
    #[serde(default)]
    stream: Option<Id>,
    #[serde(default)]
    grid: Dims,
    #[serde(default)]
    block: Dims,
    #[serde(default, rename = "registers per thread")]
    registers: Option<Id>,
    #[serde(default, rename = "shared memory")]
    shared_memory: Option<Id>,
    #[serde(default)]
    bytes: Option<Id>,
    #[serde(default)]
    correlation: Option<Id>,
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(default, borrow)]
    ph: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    cat: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    ts: Option<Micros>,
    #[serde(default)]
    dur: Option<Micros>,
    #[serde(default)]
    pid: Option<Id>,
    #[serde(default)]
    tid: Option<Id>,
    #[serde(default)]
    args: Option<RawArgs>,
}

fn dims(v: &Dims) -> Option<[u32; 3]> {
    v.0
}

fn uint(v: Option<Id>) -> Option<u64> {
    v.and_then(|i| i.0).map(|x| x.max(0) as u64)
}

pub(crate) struct Counting<R> {
    inner: R,
    n: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n.set(self.n.get() + k as u64);
        Ok(k)
    }
}

/// A byte stream, the counter of raw (compressed) bytes read from it, and the file's length.
pub type CountedStream = (Box<dyn Read>, Rc<Cell<u64>>, u64);

/// Open a Kineto file as a byte stream, with a counter of raw (compressed) bytes read.
pub fn open_stream(path: &Path, gz: bool) -> Result<CountedStream> {
    let f = std::fs::File::open(path).map_err(|e| TraceError::io(path, e))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let n = Rc::new(Cell::new(0u64));
    let counted = Counting {
        inner: f,
        n: n.clone(),
    };
    let r: Box<dyn Read> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(
            std::io::BufReader::with_capacity(1 << 18, counted),
        ))
    } else {
        Box::new(counted)
    };
    Ok((r, n, len))
}

const KEEP_KEYS: &[&str] = &[
    "schemaVersion",
    "deviceProperties",
    "baseTimeNanoseconds",
    "displayTimeUnit",
];

/// Read a Kineto trace from `path` (gzip when `gz`).
///
/// Outside `traceEvents` a small byte scanner tracks the top-level object (to find the array
/// and keep a few small metadata values); inside it, serde parses one event at a time straight
/// from a sliding buffer, so the file is scanned once and never held whole in memory.
pub fn read(
    path: &Path,
    gz: bool,
    info: &mut SourceInfo,
    sink: &mut dyn Sink,
    progress: bool,
) -> Result<()> {
    let (mut reader, counter, len) = open_stream(path, gz)?;
    let bar = Progress::new(progress, len, "Kineto events", true);
    info.format = Some(Format::Kineto);
    // sliding window: valid bytes are buf[pos..end]; the buffer only grows when a single
    // event is larger than it
    let mut buf: Vec<u8> = vec![0u8; 8 << 20];
    let mut pos = 0usize;
    let mut end = 0usize;
    let mut eof = false;
    let mut refill = |buf: &mut Vec<u8>,
                      pos: &mut usize,
                      end: &mut usize,
                      eof: &mut bool,
                      dropped: &mut u64|
     -> Result<()> {
        if *pos > 0 {
            *dropped += *pos as u64;
            buf.copy_within(*pos..*end, 0);
            *end -= *pos;
            *pos = 0;
        }
        if *end == buf.len() {
            let n = buf.len() * 2;
            buf.resize(n, 0);
        }
        let n = loop {
            match reader.read(&mut buf[*end..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(crate::detect::stream_error(path, gz, e)),
            }
        };
        *end += n;
        if n == 0 {
            *eof = true;
        }
        Ok(())
    };

    // scanner state (outside the events array)
    let mut depth: u32 = 0;
    let mut in_str = false;
    let mut esc = false;
    // bytes dropped from the front of the window so far (absolute offset = dropped + pos)
    let mut dropped: u64 = 0;
    let mut top_is_array = false;
    let mut expect_key = false;
    let mut collecting_key = false;
    let mut key_buf: Vec<u8> = Vec::new();
    let mut last_key: Vec<u8> = Vec::new();
    let mut in_events = false;
    let mut meta_capture: Option<(String, Vec<u8>)> = None;
    let mut found_events = false;
    let mut first_byte_seen = false;
    let mut n_events: u64 = 0;
    let mut n_kernels: u64 = 0;
    let mut kept: Vec<(String, Vec<u8>)> = Vec::new();

    loop {
        if pos >= end {
            if eof {
                break;
            }
            refill(&mut buf, &mut pos, &mut end, &mut eof, &mut dropped)?;
            continue;
        }
        if in_events {
            let b = buf[pos];
            match b {
                b' ' | b'\t' | b'\r' | b',' => pos += 1,
                b'\n' => pos += 1,
                b']' => {
                    pos += 1;
                    depth -= 1;
                    in_events = false;
                }
                b'{' => {
                    let slice = &buf[pos..end];
                    let mut stream =
                        serde_json::Deserializer::from_slice(slice).into_iter::<RawEvent<'_>>();
                    let parsed = match stream.next() {
                        Some(r) => r,
                        None => Err(serde::de::Error::custom("empty event")),
                    };
                    match parsed {
                        Ok(ev) => {
                            let n = stream.byte_offset();
                            handle_event(ev, sink, &mut n_kernels);
                            pos += n;
                            n_events += 1;
                            if n_events.is_multiple_of(65536) {
                                bar.set(counter.get());
                            }
                        }
                        Err(e) if e.is_eof() && !eof => {
                            refill(&mut buf, &mut pos, &mut end, &mut eof, &mut dropped)?;
                        }
                        Err(e) => {
                            let msg = if e.is_eof() {
                                format!(
                                    "unexpected end of file inside event {} of traceEvents: the trace is truncated; re-export it",
                                    n_events + 1
                                )
                            } else {
                                format!("malformed event {} in traceEvents: {e}", n_events + 1)
                            };
                            return Err(TraceError::Json {
                                path: path.to_path_buf(),
                                line: line_at(path, gz, dropped + pos as u64)
                                    + e.line().saturating_sub(1),
                                column: e.column(),
                                msg,
                            });
                        }
                    }
                }
                other => {
                    return Err(TraceError::Json {
                        path: path.to_path_buf(),
                        line: line_at(path, gz, dropped + pos as u64),
                        column: 0,
                        msg: format!(
                            "unexpected {:?} in traceEvents (expected an event object)",
                            other as char
                        ),
                    })
                }
            }
            continue;
        }
        // byte scanner outside the events array
        let b = buf[pos];
        pos += 1;
        if let Some((_, v)) = meta_capture.as_mut() {
            v.push(b);
        }
        if in_str {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == b'"' {
                in_str = false;
                if collecting_key {
                    collecting_key = false;
                    last_key = std::mem::take(&mut key_buf);
                }
            } else if collecting_key {
                key_buf.push(b);
            }
            continue;
        }
        match b {
            b'"' => {
                in_str = true;
                if depth == 1 && !top_is_array && expect_key {
                    collecting_key = true;
                    expect_key = false;
                    key_buf.clear();
                }
            }
            b'{' | b'[' => {
                if !first_byte_seen {
                    first_byte_seen = true;
                    if b == b'[' {
                        top_is_array = true;
                        found_events = true;
                        in_events = true;
                    }
                }
                depth += 1;
                if depth == 1 && b == b'{' {
                    expect_key = true;
                }
                if b == b'[' && depth == 2 && !top_is_array && last_key == b"traceEvents" {
                    found_events = true;
                    in_events = true;
                    last_key.clear();
                }
            }
            b'}' | b']' => {
                if depth == 0 {
                    return Err(TraceError::Json {
                        path: path.to_path_buf(),
                        line: line_at(path, gz, dropped + pos as u64),
                        column: 0,
                        msg: "unbalanced closing bracket".into(),
                    });
                }
                if depth == 1 {
                    if let Some((k, mut v)) = meta_capture.take() {
                        v.pop();
                        kept.push((k, v));
                    }
                }
                depth -= 1;
            }
            b',' if depth == 1 && !top_is_array => {
                expect_key = true;
                if let Some((k, mut v)) = meta_capture.take() {
                    v.pop();
                    kept.push((k, v));
                }
            }
            b':' if depth == 1 && !top_is_array => {
                let k = String::from_utf8_lossy(&last_key).into_owned();
                if KEEP_KEYS.contains(&k.as_str()) {
                    meta_capture = Some((k, Vec::new()));
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            0xEF | 0xBB | 0xBF if !first_byte_seen => {} // UTF-8 byte order mark
            _ => {
                if !first_byte_seen {
                    return Err(TraceError::NotKineto {
                        path: path.to_path_buf(),
                        what: "the JSON does not start with an object or array".into(),
                    });
                }
            }
        }
    }
    bar.finish();
    if depth != 0 || in_str || in_events {
        return Err(TraceError::Json {
            path: path.to_path_buf(),
            line: line_at(path, gz, u64::MAX),
            column: 0,
            msg: format!(
                "unexpected end of file ({depth} brackets still open after {n_events} events): the trace is truncated; re-export it"
            ),
        });
    }
    if !first_byte_seen {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    if !found_events {
        return Err(TraceError::NotKineto {
            path: path.to_path_buf(),
            what: "JSON without a `traceEvents` array".into(),
        });
    }
    let mut detail = String::from("Kineto trace");
    for (k, v) in kept {
        let val: serde_json::Value = match serde_json::from_slice(&v) {
            Ok(v) => v,
            Err(_) => continue,
        };
        match k.as_str() {
            "schemaVersion" => detail = format!("Kineto schemaVersion {val}"),
            "deviceProperties" => {
                if let Some(arr) = val.as_array() {
                    for d in arr {
                        if let (Some(id), Some(name)) = (
                            d.get("id").and_then(|x| x.as_i64()),
                            d.get("name").and_then(|x| x.as_str()),
                        ) {
                            info.devices.push((id, name.to_string()));
                        }
                    }
                }
            }
            "baseTimeNanoseconds" => detail.push_str(", baseTimeNanoseconds"),
            _ => {}
        }
    }
    info.detail = format!("{detail}, {n_events} events, {n_kernels} kernels");
    Ok(())
}

/// 1-based line of byte `offset` (or of the end of the stream), computed only on errors by
/// reading the file again.
fn line_at(path: &Path, gz: bool, offset: u64) -> usize {
    let Ok((r, _, _)) = open_stream(path, gz) else {
        return 0;
    };
    let mut line = 1usize;
    let mut seen = 0u64;
    let mut r = std::io::BufReader::with_capacity(1 << 20, r.take(offset));
    loop {
        let n = match std::io::BufRead::fill_buf(&mut r) {
            Ok(b) if !b.is_empty() => {
                line += b.iter().filter(|&&c| c == b'\n').count();
                b.len()
            }
            _ => break,
        };
        seen += n as u64;
        std::io::BufRead::consume(&mut r, n);
    }
    let _ = seen;
    line
}

fn handle_event(ev: RawEvent<'_>, sink: &mut dyn Sink, n_kernels: &mut u64) {
    if ev.ph.as_deref() != Some("X") {
        return;
    }
    let Some(cat) = ev.cat.as_deref() else {
        return;
    };
    let name = ev.name.as_deref().unwrap_or("");
    let ts = ev.ts.map(|t| t.0);
    let dur = ev.dur.map(|d| d.0).unwrap_or(0);
    let args = ev.args.unwrap_or_default();
    let pid = ev.pid.and_then(|p| p.0);
    let tid = ev.tid.and_then(|t| t.0);
    let device = args.device.and_then(|d| d.0).or(pid).unwrap_or(0);
    match cat {
        "kernel" | "Kernel" => {
            *n_kernels += 1;
            sink.kernel(&KernelEvent {
                name,
                short_name: None,
                mangled: None,
                name_key: None,
                device,
                stream: args.stream.and_then(|s| s.0).or(tid),
                start_ns: ts,
                dur_ns: Some(dur),
                grid: dims(&args.grid),
                block: dims(&args.block),
                registers: uint(args.registers).map(|r| r as u32),
                static_smem: uint(args.shared_memory),
                dynamic_smem: None,
                correlation: args.correlation.and_then(|c| c.0),
                pid,
            });
        }
        "gpu_memcpy" | "Memcpy" => {
            let n = canonical_memcpy_name(name);
            sink.memop(&MemOpEvent {
                name: &n,
                device,
                stream: args.stream.and_then(|s| s.0).or(tid),
                start_ns: ts,
                dur_ns: dur,
                bytes: uint(args.bytes),
            });
        }
        "gpu_memset" | "Memset" => sink.memop(&MemOpEvent {
            name: "Memset",
            device,
            stream: args.stream.and_then(|s| s.0).or(tid),
            start_ns: ts,
            dur_ns: dur,
            bytes: uint(args.bytes),
        }),
        "cuda_runtime" | "cuda_driver" | "Runtime" | "Driver" => sink.api(&ApiEvent {
            name,
            start_ns: ts.unwrap_or(0),
            dur_ns: dur,
            pid,
            tid,
        }),
        "user_annotation" | "gpu_user_annotation" => sink.range(&RangeEvent {
            name,
            domain: None,
            kind: if cat == "user_annotation" {
                RangeKind::Annotation
            } else {
                RangeKind::GpuAnnotation
            },
            start_ns: ts.unwrap_or(0),
            dur_ns: dur,
            pid,
            tid,
            depth: None,
            device: if cat == "gpu_user_annotation" {
                Some(device)
            } else {
                None
            },
        }),
        _ => {}
    }
}
