//! nsys SQLite exports, schema 2.9 to 3.25 and later.
//!
//! Columns are read by name (via `PRAGMA table_info`), never by position; tables are optional
//! (nsys creates them lazily); names go through `StringIds` with a per-id cache so the work per
//! row is a few integer reads.

use crate::error::{Result, TraceError};
use crate::model::*;
use crate::progress::Progress;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;

/// Event types in `NVTX_EVENTS`.
const NVTX_PUSHPOP: i64 = 59;
const NVTX_STARTEND: i64 = 60;
const NVTXT_PUSHPOP: i64 = 70;
const NVTXT_STARTEND: i64 = 71;
const NVTX_DOMAIN_CREATE: i64 = 75;

struct Db<'p> {
    conn: Connection,
    path: &'p Path,
    tables: HashSet<String>,
    strings: StringCache,
}

/// `StringIds` lookups, cached per id (one query per distinct string).
struct StringCache {
    map: HashMap<i64, Option<Rc<str>>>,
    has_table: bool,
}

impl StringCache {
    fn get(&mut self, conn: &Connection, path: &Path, id: i64) -> Result<Option<Rc<str>>> {
        if let Some(s) = self.map.get(&id) {
            return Ok(s.clone());
        }
        let v: Option<String> = if self.has_table {
            let mut st = conn
                .prepare_cached("SELECT value FROM StringIds WHERE id = ?1")
                .map_err(|e| TraceError::sqlite(path, "StringIds lookup", e))?;
            let mut rows = st
                .query([id])
                .map_err(|e| TraceError::sqlite(path, "StringIds lookup", e))?;
            match rows
                .next()
                .map_err(|e| TraceError::sqlite(path, "StringIds lookup", e))?
            {
                Some(r) => r.get::<_, Option<String>>(0).ok().flatten(),
                None => None,
            }
        } else {
            None
        };
        let v: Option<Rc<str>> = v.map(Rc::from);
        self.map.insert(id, v.clone());
        Ok(v)
    }

    fn resolve(
        &mut self,
        conn: &Connection,
        path: &Path,
        c: NameCell,
    ) -> Result<(Option<Rc<str>>, Option<u64>)> {
        Ok(match c {
            NameCell::Id(id) => (self.get(conn, path, id)?, Some(id as u64)),
            NameCell::Text(t) => (Some(Rc::from(t.as_str())), None),
            NameCell::Null => (None, None),
        })
    }
}

fn split_gtid(g: i64) -> (i64, i64) {
    ((g >> 24) & 0xFF_FFFF, g & 0xFF_FFFF)
}

impl<'p> Db<'p> {
    fn err(&self, ctx: &str, e: rusqlite::Error) -> TraceError {
        TraceError::sqlite(self.path, ctx, e)
    }

    fn columns(&self, table: &str) -> Result<Vec<String>> {
        let sql = format!("PRAGMA table_info(\"{table}\")");
        let mut st = self
            .conn
            .prepare(&sql)
            .map_err(|e| self.err(&format!("columns of {table}"), e))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(1))
            .map_err(|e| self.err(&format!("columns of {table}"), e))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(|e| self.err(&format!("columns of {table}"), e))?);
        }
        Ok(out)
    }

    fn has(&self, t: &str) -> bool {
        self.tables.contains(t)
    }

    fn count(&self, table: &str, filter: &str) -> u64 {
        let sql = format!("SELECT count(*) FROM \"{table}\" {filter}");
        self.conn
            .query_row(&sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .unwrap_or(0)
    }
}

/// Selected columns of a table, looked up by name.
struct Cols {
    names: Vec<&'static str>,
}

impl Cols {
    fn pick(present: &[String], wanted: &[&'static str]) -> Cols {
        Cols {
            names: wanted
                .iter()
                .copied()
                .filter(|w| present.iter().any(|p| p == w))
                .collect(),
        }
    }
    fn idx(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| *n == name)
    }
    fn select(&self, table: &str, filter: &str) -> String {
        let cols: Vec<String> = self.names.iter().map(|c| format!("\"{c}\"")).collect();
        format!("SELECT {} FROM \"{table}\" {filter}", cols.join(", "))
    }
}

fn int(r: &rusqlite::Row<'_>, i: Option<usize>) -> Option<i64> {
    let i = i?;
    match r.get_ref(i).ok()? {
        ValueRef::Integer(v) => Some(v),
        ValueRef::Real(f) if f.is_finite() => Some(f as i64),
        ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        _ => None,
    }
}

enum NameCell {
    Id(i64),
    Text(String),
    Null,
}

fn name_cell(r: &rusqlite::Row<'_>, i: Option<usize>) -> NameCell {
    let Some(i) = i else { return NameCell::Null };
    match r.get_ref(i) {
        Ok(ValueRef::Integer(v)) => NameCell::Id(v),
        Ok(ValueRef::Text(t)) => NameCell::Text(String::from_utf8_lossy(t).into_owned()),
        _ => NameCell::Null,
    }
}

/// Open the export read-only (no mutex: one connection per thread).
fn open_read_only(path: &Path) -> Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| TraceError::sqlite(path, "opening", e))
}

/// Read an nsys SQLite export and push its events into `sink`.
pub fn read(path: &Path, info: &mut SourceInfo, sink: &mut dyn Sink, progress: bool) -> Result<()> {
    read_with(path, info, sink, progress, false)
}

/// Like [`read`]; with `attribute_nvtx`, kernel events are named after the innermost NVTX
/// push/pop range that was open on the launching thread when the kernel was launched (joined
/// through the CUDA runtime call's correlation id), instead of after the kernel.
pub fn read_with(
    path: &Path,
    info: &mut SourceInfo,
    sink: &mut dyn Sink,
    progress: bool,
    attribute_nvtx: bool,
) -> Result<()> {
    let conn = open_read_only(path)?;
    // memory-mapped reads: fewer copies on large exports
    // memory-mapped reads (file-backed pages, reclaimable; not anonymous memory)
    let _ = conn.pragma_update(None, "mmap_size", 1i64 << 32);
    let mut db = Db {
        conn,
        path,
        tables: HashSet::new(),
        strings: StringCache {
            map: HashMap::new(),
            has_table: false,
        },
    };
    {
        let mut st = db
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table','view')")
            .map_err(|e| TraceError::sqlite(path, "reading the table list", e))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| TraceError::sqlite(path, "reading the table list", e))?;
        for r in rows {
            let name = r.map_err(|e| TraceError::sqlite(path, "reading the table list", e))?;
            db.tables.insert(name);
        }
    }
    db.strings.has_table = db.has("StringIds");
    let nsys_like = ["StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA"]
        .iter()
        .any(|t| db.has(t))
        || db
            .tables
            .iter()
            .any(|t| t.starts_with("CUPTI_ACTIVITY_KIND_"));
    if !nsys_like {
        return Err(TraceError::NotNsys {
            path: path.to_path_buf(),
            what: format!(
                "a SQLite database without nsys tables (no StringIds, META_DATA_EXPORT or CUPTI_ACTIVITY_KIND_*; it has {} tables); create one with `nsys export --type sqlite`",
                db.tables.len()
            ),
        });
    }
    info.format = Some(Format::NsysSqlite);
    read_meta(&mut db, info)?;
    read_devices(&mut db, info)?;
    if attribute_nvtx {
        read_kernels_by_nvtx(&mut db, info, sink)?;
    } else {
        read_kernels(&mut db, info, sink, progress)?;
    }
    read_memcpy(&mut db, sink)?;
    read_memset(&mut db, sink)?;
    read_nvtx(&mut db, info, sink, progress)?;
    read_runtime(&mut db, sink, progress)?;
    Ok(())
}

fn read_meta(db: &mut Db<'_>, info: &mut SourceInfo) -> Result<()> {
    let table = if db.has("META_DATA_EXPORT") {
        "META_DATA_EXPORT"
    } else if db.has("EXPORT_META_DATA") {
        "EXPORT_META_DATA"
    } else {
        info.warnings
            .push("no export metadata table (META_DATA_EXPORT / EXPORT_META_DATA)".into());
        return Ok(());
    };
    let cols = db.columns(table)?;
    if !(cols.iter().any(|c| c == "name") && cols.iter().any(|c| c == "value")) {
        return Ok(());
    }
    let sql = format!("SELECT name, value FROM \"{table}\"");
    let mut st = db
        .conn
        .prepare(&sql)
        .map_err(|e| TraceError::sqlite(db.path, table, e))?;
    let mut rows = st
        .query([])
        .map_err(|e| TraceError::sqlite(db.path, table, e))?;
    let mut schema = None;
    while let Some(r) = rows
        .next()
        .map_err(|e| TraceError::sqlite(db.path, table, e))?
    {
        let k: String = r
            .get::<_, Option<String>>(0)
            .ok()
            .flatten()
            .unwrap_or_default();
        let v: String = r
            .get::<_, Option<String>>(1)
            .ok()
            .flatten()
            .unwrap_or_default();
        match k.as_str() {
            "EXPORT_SCHEMA_VERSION" => schema = Some(v),
            "EXPORT_PRODUCT_VERSION" => info.tool_version = Some(format!("nsys {v}")),
            _ => {}
        }
    }
    info.detail = format!(
        "export schema {} ({table})",
        schema.unwrap_or_else(|| "unknown".into())
    );
    Ok(())
}

fn read_devices(db: &mut Db<'_>, info: &mut SourceInfo) -> Result<()> {
    if !db.has("TARGET_INFO_GPU") {
        return Ok(());
    }
    let cols = db.columns("TARGET_INFO_GPU")?;
    let c = Cols::pick(&cols, &["id", "name", "cuDevice"]);
    let (Some(ii), Some(ni)) = (c.idx("id"), c.idx("name")) else {
        return Ok(());
    };
    let mut st = db
        .conn
        .prepare(&c.select("TARGET_INFO_GPU", ""))
        .map_err(|e| TraceError::sqlite(db.path, "TARGET_INFO_GPU", e))?;
    let mut rows = st
        .query([])
        .map_err(|e| TraceError::sqlite(db.path, "TARGET_INFO_GPU", e))?;
    let mut devs = Vec::new();
    while let Some(r) = rows
        .next()
        .map_err(|e| TraceError::sqlite(db.path, "TARGET_INFO_GPU", e))?
    {
        let id = int(r, Some(ii)).unwrap_or(-1);
        let name: String = r
            .get::<_, Option<String>>(ni)
            .ok()
            .flatten()
            .unwrap_or_default();
        if !devs.iter().any(|(d, _)| *d == id) {
            devs.push((id, name));
        }
    }
    devs.sort();
    info.devices = devs;
    Ok(())
}

fn read_kernels(
    db: &mut Db<'_>,
    info: &mut SourceInfo,
    sink: &mut dyn Sink,
    progress: bool,
) -> Result<()> {
    const T: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
    if !db.has(T) {
        info.warnings
            .push("no CUPTI_ACTIVITY_KIND_KERNEL table: the capture has no CUDA kernels".into());
        return Ok(());
    }
    let present = db.columns(T)?;
    let c = Cols::pick(
        &present,
        &[
            "start",
            "end",
            "deviceId",
            "streamId",
            "demangledName",
            "shortName",
            "mangledName",
            "registersPerThread",
            "gridX",
            "gridY",
            "gridZ",
            "blockX",
            "blockY",
            "blockZ",
            "staticSharedMemory",
            "dynamicSharedMemory",
            "correlationId",
            "globalPid",
        ],
    );
    for req in ["start", "end"] {
        if c.idx(req).is_none() {
            return Err(TraceError::NotNsys {
                path: db.path.to_path_buf(),
                what: format!("table {T} has no `{req}` column"),
            });
        }
    }
    if c.idx("demangledName").is_none() && c.idx("shortName").is_none() {
        return Err(TraceError::NotNsys {
            path: db.path.to_path_buf(),
            what: format!("table {T} has neither `demangledName` nor `shortName`"),
        });
    }
    let total = db.count(T, "");
    let bar = Progress::new(progress, total, "kernels", false);
    let (i_start, i_end, i_dev, i_stream) = (
        c.idx("start"),
        c.idx("end"),
        c.idx("deviceId"),
        c.idx("streamId"),
    );
    let (i_dem, i_short, i_mang) = (
        c.idx("demangledName"),
        c.idx("shortName"),
        c.idx("mangledName"),
    );
    let i_regs = c.idx("registersPerThread");
    let ig = [c.idx("gridX"), c.idx("gridY"), c.idx("gridZ")];
    let ib = [c.idx("blockX"), c.idx("blockY"), c.idx("blockZ")];
    let (i_ss, i_ds, i_corr, i_pid) = (
        c.idx("staticSharedMemory"),
        c.idx("dynamicSharedMemory"),
        c.idx("correlationId"),
        c.idx("globalPid"),
    );
    let sql = c.select(T, "");
    let conn = &db.conn;
    let path = db.path;
    let strings = &mut db.strings;
    let mut st = conn
        .prepare(&sql)
        .map_err(|e| TraceError::sqlite(path, T, e))?;
    let mut rows = st.query([]).map_err(|e| TraceError::sqlite(path, T, e))?;
    let mut n: u64 = 0;
    while let Some(r) = rows.next().map_err(|e| TraceError::sqlite(path, T, e))? {
        n += 1;
        if n.is_multiple_of(65536) {
            bar.set(n);
        }
        let start = int(r, i_start);
        let end = int(r, i_end);
        let (dem, key) = strings.resolve(conn, path, name_cell(r, i_dem))?;
        let (short, skey) = strings.resolve(conn, path, name_cell(r, i_short))?;
        let mangled = match i_mang {
            Some(_) => strings.resolve(conn, path, name_cell(r, i_mang))?.0,
            None => None,
        };
        let (name, key) = match (&dem, &short) {
            (Some(d), _) if !d.is_empty() => (d.clone(), key),
            (_, Some(s)) => (s.clone(), skey),
            _ => (Rc::from("<unnamed kernel>"), None),
        };
        let dims = |ix: &[Option<usize>; 3]| -> Option<[u32; 3]> {
            let x = int(r, ix[0])?;
            let y = int(r, ix[1]).unwrap_or(1);
            let z = int(r, ix[2]).unwrap_or(1);
            Some([x.max(0) as u32, y.max(0) as u32, z.max(0) as u32])
        };
        let ev = KernelEvent {
            name: &name,
            short_name: short.as_deref(),
            mangled: mangled.as_deref(),
            name_key: key,
            device: int(r, i_dev).unwrap_or(0),
            stream: int(r, i_stream),
            start_ns: start,
            dur_ns: match (start, end) {
                (Some(s), Some(e)) => Some(e.saturating_sub(s)),
                _ => None,
            },
            grid: dims(&ig),
            block: dims(&ib),
            registers: int(r, i_regs).map(|v| v.max(0) as u32),
            static_smem: int(r, i_ss).map(|v| v.max(0) as u64),
            dynamic_smem: int(r, i_ds).map(|v| v.max(0) as u64),
            correlation: int(r, i_corr),
            pid: int(r, i_pid).map(|g| split_gtid(g).0),
        };
        sink.kernel(&ev);
    }
    bar.finish();
    Ok(())
}

fn read_memcpy(db: &mut Db<'_>, sink: &mut dyn Sink) -> Result<()> {
    const T: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
    if !db.has(T) {
        return Ok(());
    }
    // copyKind labels: the ENUM table when the export has one (new names like
    // "Host-to-Device"), else the built-in CUDA_MEMCPY_KIND names (old "HtoD").
    let mut kinds: HashMap<i64, String> = HashMap::new();
    if db.has("ENUM_CUDA_MEMCPY_OPER") {
        let cols = db.columns("ENUM_CUDA_MEMCPY_OPER")?;
        let label_col = if cols.iter().any(|c| c == "label") {
            "label"
        } else {
            "name"
        };
        if let Ok(mut st) = db.conn.prepare(&format!(
            "SELECT id, {label_col} FROM ENUM_CUDA_MEMCPY_OPER"
        )) {
            if let Ok(rows) =
                st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            {
                for (id, label) in rows.flatten() {
                    kinds.insert(id, canonical_memcpy_name(&label));
                }
            }
        }
    }
    let present = db.columns(T)?;
    let c = Cols::pick(
        &present,
        &["start", "end", "deviceId", "streamId", "bytes", "copyKind"],
    );
    if c.idx("start").is_none() || c.idx("end").is_none() {
        return Ok(());
    }
    let i_kind = c.idx("copyKind");
    read_memop_rows(db, T, &c, sink, |r| {
        let kind = int(r, i_kind).unwrap_or(0);
        kinds
            .get(&kind)
            .map(|s| s.as_str())
            .unwrap_or_else(|| memcpy_kind_name(kind))
    })
}

/// Stream the rows of a memcpy/memset activity table (`c` picked from it, with `start` and
/// `end`) into `sink` as memory operations named by `name_of`.
fn read_memop_rows<'n>(
    db: &Db<'_>,
    table: &str,
    c: &Cols,
    sink: &mut dyn Sink,
    name_of: impl Fn(&rusqlite::Row<'_>) -> &'n str,
) -> Result<()> {
    let mut st = db
        .conn
        .prepare(&c.select(table, ""))
        .map_err(|e| TraceError::sqlite(db.path, table, e))?;
    let mut rows = st
        .query([])
        .map_err(|e| TraceError::sqlite(db.path, table, e))?;
    while let Some(r) = rows
        .next()
        .map_err(|e| TraceError::sqlite(db.path, table, e))?
    {
        let s = int(r, c.idx("start")).unwrap_or(0);
        let e = int(r, c.idx("end")).unwrap_or(s);
        sink.memop(&MemOpEvent {
            name: name_of(r),
            device: int(r, c.idx("deviceId")).unwrap_or(0),
            stream: int(r, c.idx("streamId")),
            start_ns: Some(s),
            dur_ns: e.saturating_sub(s),
            bytes: int(r, c.idx("bytes")).map(|b| b.max(0) as u64),
        });
    }
    Ok(())
}

fn read_memset(db: &mut Db<'_>, sink: &mut dyn Sink) -> Result<()> {
    const T: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
    if !db.has(T) {
        return Ok(());
    }
    let present = db.columns(T)?;
    let c = Cols::pick(&present, &["start", "end", "deviceId", "streamId", "bytes"]);
    if c.idx("start").is_none() || c.idx("end").is_none() {
        return Ok(());
    }
    read_memop_rows(db, T, &c, sink, |_| "Memset")
}

fn read_nvtx(
    db: &mut Db<'_>,
    info: &mut SourceInfo,
    sink: &mut dyn Sink,
    progress: bool,
) -> Result<()> {
    const T: &str = "NVTX_EVENTS";
    if !db.has(T) {
        return Ok(());
    }
    let present = db.columns(T)?;
    let c = Cols::pick(
        &present,
        &[
            "start",
            "end",
            "eventType",
            "text",
            "textId",
            "globalTid",
            "domainId",
        ],
    );
    if c.idx("start").is_none() || c.idx("eventType").is_none() {
        info.warnings
            .push("NVTX_EVENTS lacks start/eventType columns; NVTX ranges skipped".into());
        return Ok(());
    }
    let (i_start, i_end, i_type, i_text) = (
        c.idx("start"),
        c.idx("end"),
        c.idx("eventType"),
        c.idx("text"),
    );
    let (i_tdid, i_tid, i_dom) = (c.idx("textId"), c.idx("globalTid"), c.idx("domainId"));
    let db_path = db.path;
    let text_of = |strings: &mut StringCache,
                   conn: &Connection,
                   r: &rusqlite::Row<'_>|
     -> Result<Option<Rc<str>>> {
        if let Some(i) = i_text {
            if let Ok(ValueRef::Text(t)) = r.get_ref(i) {
                return Ok(Some(Rc::from(String::from_utf8_lossy(t).as_ref())));
            }
        }
        match int(r, i_tdid) {
            Some(id) => strings.get(conn, db_path, id),
            None => Ok(None),
        }
    };
    // domains (event type 75), keyed by domainId
    let mut domains: HashMap<i64, Rc<str>> = HashMap::new();
    {
        let sql = c.select(T, &format!("WHERE eventType = {NVTX_DOMAIN_CREATE}"));
        let conn = open_read_only(db.path)?;
        let mut st = conn
            .prepare(&sql)
            .map_err(|e| TraceError::sqlite(db.path, T, e))?;
        let mut rows = st
            .query([])
            .map_err(|e| TraceError::sqlite(db.path, T, e))?;
        while let Some(r) = rows.next().map_err(|e| TraceError::sqlite(db.path, T, e))? {
            if let (Some(d), Some(t)) = (int(r, i_dom), text_of(&mut db.strings, &db.conn, r)?) {
                domains.insert(d, t);
            }
        }
    }
    let filter = format!(
        "WHERE eventType IN ({NVTX_PUSHPOP},{NVTX_STARTEND},{NVTXT_PUSHPOP},{NVTXT_STARTEND})"
    );
    let total = db.count(T, &filter);
    let bar = Progress::new(progress, total, "NVTX ranges", false);
    let conn = open_read_only(db.path)?;
    // memory-mapped reads (file-backed pages, reclaimable; not anonymous memory)
    let _ = conn.pragma_update(None, "mmap_size", 1i64 << 32);
    let mut st = conn
        .prepare(&c.select(T, &filter))
        .map_err(|e| TraceError::sqlite(db.path, T, e))?;
    let mut rows = st
        .query([])
        .map_err(|e| TraceError::sqlite(db.path, T, e))?;
    // Nesting of push/pop ranges per thread, computed while rows arrive in start order.
    struct Stack {
        ends: Vec<i64>,
        last_start: i64,
        ordered: bool,
    }
    let mut stacks: HashMap<i64, Stack> = HashMap::new();
    let mut n = 0u64;
    let mut open_ended = 0u64;
    while let Some(r) = rows.next().map_err(|e| TraceError::sqlite(db.path, T, e))? {
        n += 1;
        if n.is_multiple_of(65536) {
            bar.set(n);
        }
        let start = int(r, i_start).unwrap_or(0);
        let Some(end) = int(r, i_end) else {
            open_ended += 1;
            continue;
        };
        let ty = int(r, i_type).unwrap_or(0);
        let gtid = int(r, i_tid);
        let (pid, tid) = match gtid {
            Some(g) => {
                let (p, t) = split_gtid(g);
                (Some(p), Some(t))
            }
            None => (None, None),
        };
        let pushpop = ty == NVTX_PUSHPOP || ty == NVTXT_PUSHPOP;
        let depth = if pushpop {
            let key = gtid.unwrap_or(0);
            let s = stacks.entry(key).or_insert(Stack {
                ends: Vec::new(),
                last_start: i64::MIN,
                ordered: true,
            });
            if start < s.last_start {
                s.ordered = false;
            }
            s.last_start = start;
            if s.ordered {
                while s.ends.last().is_some_and(|&e| e <= start) {
                    s.ends.pop();
                }
                let d = s.ends.len() as u32;
                s.ends.push(end);
                Some(d)
            } else {
                None
            }
        } else {
            None
        };
        // `text` is borrowed straight from the row (no allocation); `textId` goes through the
        // StringIds cache
        let direct: Option<&str> = match i_text.map(|i| r.get_ref(i)) {
            Some(Ok(ValueRef::Text(t))) => std::str::from_utf8(t).ok(),
            _ => None,
        };
        let registered = if direct.is_none() {
            text_of(&mut db.strings, &db.conn, r)?
        } else {
            None
        };
        let domain = int(r, i_dom).and_then(|d| domains.get(&d).cloned());
        sink.range(&RangeEvent {
            name: direct
                .or(registered.as_deref())
                .unwrap_or("<unnamed range>"),
            domain: domain.as_deref(),
            kind: if pushpop {
                RangeKind::PushPop
            } else {
                RangeKind::StartEnd
            },
            start_ns: start,
            dur_ns: end.saturating_sub(start),
            pid,
            tid,
            depth,
            device: None,
        });
    }
    if open_ended > 0 {
        info.warnings.push(format!(
            "{open_ended} NVTX ranges were never closed (no end time) and are skipped"
        ));
    }
    bar.finish();
    Ok(())
}

fn read_runtime(db: &mut Db<'_>, sink: &mut dyn Sink, progress: bool) -> Result<()> {
    const T: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
    if !db.has(T) {
        return Ok(());
    }
    let present = db.columns(T)?;
    let c = Cols::pick(&present, &["start", "end", "nameId", "name", "globalTid"]);
    if c.idx("start").is_none() || c.idx("end").is_none() {
        return Ok(());
    }
    // eventClass 67 (TRACE_PROCESS_EVENT_CUDABACKTRACE) duplicates calls in older exports
    let filter = if present.iter().any(|p| p == "eventClass") {
        "WHERE eventClass != 67"
    } else {
        ""
    };
    let total = db.count(T, filter);
    let bar = Progress::new(progress, total, "CUDA API calls", false);
    let conn = open_read_only(db.path)?;
    let mut st = conn
        .prepare(&c.select(T, filter))
        .map_err(|e| TraceError::sqlite(db.path, T, e))?;
    let mut rows = st
        .query([])
        .map_err(|e| TraceError::sqlite(db.path, T, e))?;
    let mut n = 0u64;
    while let Some(r) = rows.next().map_err(|e| TraceError::sqlite(db.path, T, e))? {
        n += 1;
        if n.is_multiple_of(65536) {
            bar.set(n);
        }
        let name = match int(r, c.idx("nameId")) {
            Some(id) => db.strings.get(&db.conn, db.path, id)?,
            None => match c.idx("name").map(|i| r.get_ref(i)) {
                Some(Ok(ValueRef::Text(t))) => Some(Rc::from(String::from_utf8_lossy(t).as_ref())),
                _ => None,
            },
        };
        let s = int(r, c.idx("start")).unwrap_or(0);
        let e = int(r, c.idx("end")).unwrap_or(s);
        let (pid, tid) = match int(r, c.idx("globalTid")) {
            Some(g) => {
                let (p, t) = split_gtid(g);
                (Some(p), Some(t))
            }
            None => (None, None),
        };
        sink.api(&ApiEvent {
            name: name.as_deref().unwrap_or("<unknown API>"),
            start_ns: s,
            dur_ns: e.saturating_sub(s),
            pid,
            tid,
        });
    }
    bar.finish();
    Ok(())
}

/// Kernel time attributed to the innermost NVTX push/pop range open on the launching thread.
/// Both sides are streamed in (thread, time) order by SQLite and merged with a per-thread range
/// stack, so memory stays bounded by the nesting depth.
fn read_kernels_by_nvtx(db: &mut Db<'_>, info: &mut SourceInfo, sink: &mut dyn Sink) -> Result<()> {
    const K: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
    const R: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
    const N: &str = "NVTX_EVENTS";
    for t in [K, R, N] {
        if !db.has(t) {
            return Err(TraceError::Unsupported {
                path: db.path.to_path_buf(),
                what: format!("an export without {t}"),
                why: "grouping kernels by NVTX range needs kernels, CUDA runtime calls and NVTX ranges".into(),
            });
        }
    }
    let kc = db.columns(K)?;
    let rc = db.columns(R)?;
    let nc = db.columns(N)?;
    let has = |cols: &[String], c: &str| cols.iter().any(|x| x == c);
    for (cols, t, c) in [
        (&kc, K, "correlationId"),
        (&rc, R, "correlationId"),
        (&rc, R, "globalTid"),
        (&nc, N, "globalTid"),
    ] {
        if !has(cols, c) {
            return Err(TraceError::NotNsys {
                path: db.path.to_path_buf(),
                what: format!("table {t} has no `{c}` column"),
            });
        }
    }
    let same_process = if has(&kc, "globalPid") {
        " AND (r.globalTid >> 24) = (k.globalPid >> 24)"
    } else {
        ""
    };
    let ksql = format!(
        "SELECT r.globalTid, r.start, k.start, k.\"end\", k.deviceId FROM {K} AS k \
         LEFT JOIN {R} AS r ON r.correlationId = k.correlationId{same_process} \
         ORDER BY r.globalTid, r.start"
    );
    let text_col = if has(&nc, "text") { "text" } else { "NULL" };
    let tid_col = if has(&nc, "textId") { "textId" } else { "NULL" };
    let nsql = format!(
        "SELECT globalTid, start, \"end\", {text_col}, {tid_col} FROM {N} \
         WHERE eventType IN ({NVTX_PUSHPOP},{NVTXT_PUSHPOP}) AND \"end\" IS NOT NULL AND globalTid IS NOT NULL \
         ORDER BY globalTid, start"
    );
    let conn = &db.conn;
    let path = db.path;
    let strings = &mut db.strings;
    let mut kst = conn
        .prepare(&ksql)
        .map_err(|e| TraceError::sqlite(path, "joining kernels to launches", e))?;
    let mut nst = conn
        .prepare(&nsql)
        .map_err(|e| TraceError::sqlite(path, "reading NVTX ranges", e))?;
    let mut krows = kst
        .query([])
        .map_err(|e| TraceError::sqlite(path, "joining kernels to launches", e))?;
    let mut nrows = nst
        .query([])
        .map_err(|e| TraceError::sqlite(path, "reading NVTX ranges", e))?;
    struct Nv {
        g: i64,
        start: i64,
        end: i64,
        name: Rc<str>,
    }
    let mut fetch = |strings: &mut StringCache| -> Result<Option<Nv>> {
        let Some(r) = nrows
            .next()
            .map_err(|e| TraceError::sqlite(path, "reading NVTX ranges", e))?
        else {
            return Ok(None);
        };
        let text: Option<Rc<str>> = match r.get_ref(3) {
            Ok(ValueRef::Text(t)) => Some(Rc::from(crate::names::canonical_range_name(
                &String::from_utf8_lossy(t),
            ))),
            _ => match int(r, Some(4)) {
                Some(id) => strings
                    .get(conn, path, id)?
                    .map(|s| Rc::from(crate::names::canonical_range_name(&s))),
                None => None,
            },
        };
        Ok(Some(Nv {
            g: int(r, Some(0)).unwrap_or(0),
            start: int(r, Some(1)).unwrap_or(0),
            end: int(r, Some(2)).unwrap_or(0),
            name: text.unwrap_or_else(|| Rc::from("<unnamed range>")),
        }))
    };
    let outside: Rc<str> = Rc::from("(outside NVTX ranges)");
    let unlinked: Rc<str> = Rc::from("(no launch record)");
    let mut next = fetch(strings)?;
    let mut cur: Option<i64> = None;
    let mut stack: Vec<(i64, Rc<str>)> = Vec::new();
    let mut n_unlinked = 0u64;
    while let Some(r) = krows
        .next()
        .map_err(|e| TraceError::sqlite(path, "joining kernels to launches", e))?
    {
        let (ks, ke) = (int(r, Some(2)), int(r, Some(3)));
        let dev = int(r, Some(4)).unwrap_or(0);
        let name = match (int(r, Some(0)), int(r, Some(1))) {
            (Some(g), Some(t)) => {
                if cur != Some(g) {
                    stack.clear();
                    cur = Some(g);
                }
                while let Some(nv) = next.as_ref() {
                    if (nv.g, nv.start) > (g, t) {
                        break;
                    }
                    if nv.g == g {
                        while stack.last().is_some_and(|(e, _)| *e < nv.start) {
                            stack.pop();
                        }
                        stack.push((nv.end, nv.name.clone()));
                    }
                    next = fetch(strings)?;
                }
                while stack.last().is_some_and(|(e, _)| *e < t) {
                    stack.pop();
                }
                stack
                    .last()
                    .map(|x| x.1.clone())
                    .unwrap_or_else(|| outside.clone())
            }
            _ => {
                n_unlinked += 1;
                unlinked.clone()
            }
        };
        sink.kernel(&KernelEvent {
            name: &name,
            device: dev,
            start_ns: ks,
            dur_ns: match (ks, ke) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            },
            ..Default::default()
        });
    }
    if n_unlinked > 0 {
        info.warnings.push(format!(
            "{n_unlinked} kernels have no matching CUDA runtime call (correlation id) and are grouped as \"(no launch record)\""
        ));
    }
    info.detail
        .push_str("; kernels grouped by innermost NVTX range at launch");
    Ok(())
}
