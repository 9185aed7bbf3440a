//! Convert any supported trace to Chrome trace-event JSON (opens in Perfetto / chrome://tracing).

use crate::error::{Result, TraceError};
use crate::model::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

const GPU_PID_BASE: i64 = 1_000_000_000;

/// A [`Sink`] that streams Chrome trace events to a writer.
pub struct ChromeWriter<'w> {
    w: &'w mut dyn Write,
    first: bool,
    err: Option<std::io::Error>,
    pub events: u64,
    pub skipped_aggregates: u64,
    gpus: BTreeSet<i64>,
    /// (device, stream) pairs seen, named "stream N" in the output
    streams: BTreeSet<(i64, i64)>,
    /// for sources without timestamps (ncu): next free time per device
    cursor: BTreeMap<i64, i64>,
}

fn us(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

impl<'w> ChromeWriter<'w> {
    pub fn new(w: &'w mut dyn Write) -> Self {
        let mut c = ChromeWriter {
            w,
            first: true,
            err: None,
            events: 0,
            skipped_aggregates: 0,
            gpus: BTreeSet::new(),
            streams: BTreeSet::new(),
            cursor: BTreeMap::new(),
        };
        c.raw("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        c
    }

    fn raw(&mut self, s: &str) {
        if self.err.is_none() {
            if let Err(e) = self.w.write_all(s.as_bytes()) {
                self.err = Some(e);
            }
        }
    }

    fn event(&mut self, body: String) {
        if !self.first {
            self.raw(",\n");
        }
        self.first = false;
        self.raw(&body);
        self.events += 1;
    }

    fn place(&mut self, device: i64, start: Option<i64>, dur: i64) -> i64 {
        match start {
            Some(s) => s,
            None => {
                let c = self.cursor.entry(device).or_insert(0);
                let s = *c;
                *c = c.saturating_add(dur.max(0)).saturating_add(1000);
                s
            }
        }
    }

    /// Close the JSON document; returns the number of events written.
    pub fn finish(mut self) -> std::io::Result<u64> {
        let gpus: Vec<i64> = self.gpus.iter().copied().collect();
        for d in gpus {
            let body = format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":\"GPU {d}\"}}}}",
                GPU_PID_BASE + d
            );
            self.event(body);
            self.events -= 1;
        }
        let streams: Vec<(i64, i64)> = self.streams.iter().copied().collect();
        for (d, st) in streams {
            let body = format!(
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{st},\"args\":{{\"name\":\"stream {st}\"}}}}",
                GPU_PID_BASE + d
            );
            self.event(body);
            self.events -= 1;
        }
        self.raw("\n]}\n");
        match self.err.take() {
            Some(e) => Err(e),
            None => Ok(self.events),
        }
    }
}

impl Sink for ChromeWriter<'_> {
    fn kernel(&mut self, k: &KernelEvent<'_>) {
        let dur = k.dur_ns.unwrap_or(0);
        let ts = self.place(k.device, k.start_ns, dur);
        self.gpus.insert(k.device);
        self.streams.insert((k.device, k.stream.unwrap_or(0)));
        let mut args = Vec::new();
        if let Some(g) = k.grid {
            args.push(format!("\"grid\":[{},{},{}]", g[0], g[1], g[2]));
        }
        if let Some(b) = k.block {
            args.push(format!("\"block\":[{},{},{}]", b[0], b[1], b[2]));
        }
        if let Some(r) = k.registers {
            args.push(format!("\"registers per thread\":{r}"));
        }
        if let Some(c) = k.correlation {
            args.push(format!("\"correlation\":{c}"));
        }
        if k.dur_ns.is_none() {
            args.push("\"duration\":\"not measured\"".into());
        }
        let body = format!(
            "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{{}}}}}",
            js(k.name),
            GPU_PID_BASE + k.device,
            k.stream.unwrap_or(0),
            us(ts),
            us(dur),
            args.join(",")
        );
        self.event(body);
    }

    fn aggregate(&mut self, _kind: AggregateKind, _a: &AggregateEvent<'_>) {
        self.skipped_aggregates += 1;
    }

    fn memop(&mut self, m: &MemOpEvent<'_>) {
        let ts = self.place(m.device, m.start_ns, m.dur_ns);
        self.gpus.insert(m.device);
        self.streams.insert((m.device, m.stream.unwrap_or(0)));
        let cat = if m.name == "Memset" {
            "gpu_memset"
        } else {
            "gpu_memcpy"
        };
        let body = format!(
            "{{\"ph\":\"X\",\"cat\":\"{cat}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{\"bytes\":{}}}}}",
            js(m.name),
            GPU_PID_BASE + m.device,
            m.stream.unwrap_or(0),
            us(ts),
            us(m.dur_ns),
            m.bytes.unwrap_or(0)
        );
        self.event(body);
    }

    fn range(&mut self, r: &RangeEvent<'_>) {
        let (pid, cat) = match r.device {
            Some(d) => {
                self.gpus.insert(d);
                (GPU_PID_BASE + d, "gpu_user_annotation")
            }
            None => (r.pid.unwrap_or(0), "nvtx"),
        };
        let mut args = Vec::new();
        if let Some(d) = r.domain {
            args.push(format!("\"domain\":{}", js(d)));
        }
        if let Some(d) = r.depth {
            args.push(format!("\"depth\":{d}"));
        }
        let body = format!(
            "{{\"ph\":\"X\",\"cat\":\"{cat}\",\"name\":{},\"pid\":{pid},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{{}}}}}",
            js(r.name),
            r.tid.unwrap_or(0),
            us(r.start_ns),
            us(r.dur_ns),
            args.join(",")
        );
        self.event(body);
    }

    fn api(&mut self, a: &ApiEvent<'_>) {
        let body = format!(
            "{{\"ph\":\"X\",\"cat\":\"cuda_api\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{}}}",
            js(a.name),
            a.pid.unwrap_or(0),
            a.tid.unwrap_or(0),
            us(a.start_ns),
            us(a.dur_ns)
        );
        self.event(body);
    }
}

/// Convert `input` to a Chrome trace at `output` (written atomically). Returns the event count.
pub fn convert(input: &std::path::Path, output: &std::path::Path, progress: bool) -> Result<u64> {
    let mut result: Option<Result<u64>> = None;
    crate::output::write_atomic(output, |w| {
        let mut cw = ChromeWriter::new(w);
        let r = crate::read_trace(input, &mut cw, crate::ReadOptions {
                progress,
                ..Default::default()
            });
        let skipped = cw.skipped_aggregates;
        let n = cw.finish();
        match (r, n) {
            (Err(e), _) => {
                result = Some(Err(e));
                Err(std::io::Error::other("read failed"))
            }
            (Ok(_), Err(e)) => Err(e),
            (Ok(_), Ok(0)) if skipped > 0 => {
                result = Some(Err(TraceError::Unsupported {
                    path: input.to_path_buf(),
                    what: "an aggregated report (summary tables only)".into(),
                    why: "it has no timeline to convert; use `nsys stats --report cuda_gpu_trace` or the .sqlite export".into(),
                }));
                Err(std::io::Error::other("no timeline"))
            }
            (Ok(_), Ok(n)) => {
                result = Some(Ok(n));
                Ok(())
            }
        }
    })
    .map_err(|e| match result.take() {
        Some(Err(inner)) => inner,
        _ => e,
    })?;
    result.unwrap_or(Ok(0))
}
