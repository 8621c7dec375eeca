//! A loopback frame adapter that lets a native-protocol-v4 driver (scylla 1.9 speaks v4
//! only) talk to a Cassandra that speaks v3 only (Cassandra 2.1), so the CQL store can be
//! tested against one real Cassandra. Test-only; never in front of a production cluster.
//!
//! What it changes, and nothing else (frames are otherwise forwarded byte for byte):
//! - the version byte of every frame: 0x04 → 0x03 towards the server, 0x83 → 0x84 back;
//! - STARTUP: `CQL_VERSION` becomes 3.2.0 (what 2.1 accepts);
//! - PREPARED results gain v4's `pk_count = 0` (no partition key indexes: the driver then
//!   routes without token awareness, which on one node changes nothing);
//! - the driver's topology query selects `rpc_address` from `system.local`, which 2.1.0
//!   lacks: the column is dropped from the query and added to the answer (an `inet`, the
//!   adapter's own listen address, so the driver keeps connecting through the adapter);
//! - `system_schema.keyspaces` / `system_schema.columns` reads (the store's schema checks)
//!   are answered from 2.1's `system.schema_keyspaces` / `system.schema_columns`, with
//!   2.1's column kinds (`clustering_key`) and validator class names
//!   (`org.apache.cassandra.db.marshal.LongType`) translated to 3.x spellings.
//!
//! Compressed frames cannot be rewritten and are refused (the store does not compress).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::frame::{
    FLAG_COMPRESSION, FrameError, HEADER_LEN, MAX_BODY_LEN, Reader, Writer, opcode,
};

/// Failures of the adapter (start-up) and of one proxied connection.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// A socket operation failed.
    #[error("cql adapter: {what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A frame body could not be parsed where the adapter has to rewrite it.
    #[error("cql adapter: malformed frame: {0}")]
    Frame(#[from] FrameError),
    /// A frame the adapter cannot handle (compressed, too long, unknown version).
    #[error("cql adapter: {0}")]
    Unsupported(String),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> AdapterError {
    move |source| AdapterError::Io { what, source }
}

/// The CQL version Cassandra 2.1 accepts in STARTUP.
const CQL_VERSION_21: &str = "3.2.0";

/// RESULT kinds.
const RESULT_ROWS: i32 = 2;
const RESULT_PREPARED: i32 = 4;

/// Rows metadata flags.
const META_GLOBAL_SPEC: i32 = 0x01;
const META_HAS_MORE_PAGES: i32 = 0x02;
const META_NO_METADATA: i32 = 0x04;

/// How the answer to a request must be fixed on its way back.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fix {
    /// Nothing beyond the version byte.
    None,
    /// A PREPARED result: add `pk_count`; remember `rows` for EXECUTEs of the statement.
    Prepared(Box<Self>),
    /// Rows of `system.schema_columns` read as `system_schema.columns`.
    SchemaColumns,
    /// Insert an `inet` column `rpc_address` at this index, valued the adapter's address.
    RpcAddress(usize),
}

/// A query text the adapter rewrites, and how its rows must be fixed.
fn rewrite(query: &str) -> Option<(String, Fix)> {
    let norm = query.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = norm.to_ascii_lowercase();
    if lower.contains("from system_schema.keyspaces") {
        let q = replace_ci(&norm, "system_schema.keyspaces", "system.schema_keyspaces");
        return Some((q, Fix::None));
    }
    if lower
        == "select column_name, kind, type from system_schema.columns where keyspace_name = ? and table_name = ?"
    {
        return Some((
            "SELECT column_name, type, validator FROM system.schema_columns \
             WHERE keyspace_name = ? AND columnfamily_name = ?"
                .to_owned(),
            Fix::SchemaColumns,
        ));
    }
    // The driver's topology query: `SELECT a, rpc_address, b FROM system.local WHERE …`.
    if lower.starts_with("select ") && lower.contains(" from system.local") {
        let from = lower.find(" from ")?;
        let cols: Vec<&str> = norm["select ".len()..from]
            .split(',')
            .map(str::trim)
            .collect();
        let at = cols
            .iter()
            .position(|c| c.eq_ignore_ascii_case("rpc_address"))?;
        let kept: Vec<&str> = cols
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, c)| *c)
            .collect();
        if kept.is_empty() {
            return None;
        }
        let q = format!("SELECT {}{}", kept.join(", "), &norm[from..]);
        return Some((q, Fix::RpcAddress(at)));
    }
    None
}

fn replace_ci(s: &str, needle: &str, with: &str) -> String {
    let lower = s.to_ascii_lowercase();
    match lower.find(needle) {
        Some(i) => format!("{}{}{}", &s[..i], with, &s[i + needle.len()..]),
        None => s.to_owned(),
    }
}

/// A 3.x `system_schema.columns.kind` for a 2.1 `system.schema_columns.type`.
fn kind_of_21(t: &str) -> &str {
    match t {
        "clustering_key" => "clustering",
        "compact_value" => "regular",
        other => other,
    }
}

/// The CQL type name of a 2.1 validator class (`org.apache.cassandra.db.marshal.LongType`),
/// `ReversedType(…)` and `FrozenType(…)` unwrapped, collections spelled as in CQL.
fn cql_of_validator(v: &str) -> String {
    let v = v.trim();
    let short = v
        .strip_prefix("org.apache.cassandra.db.marshal.")
        .unwrap_or(v);
    if let Some(open) = short.find('(')
        && short.ends_with(')')
    {
        let (outer, inner) = (&short[..open], &short[open + 1..short.len() - 1]);
        let args = split_top(inner);
        let arg = |i: usize| {
            args.get(i)
                .map_or_else(String::new, |a| cql_of_validator(a))
        };
        return match outer {
            "ReversedType" | "FrozenType" => arg(0),
            "ListType" => format!("list<{}>", arg(0)),
            "SetType" => format!("set<{}>", arg(0)),
            "MapType" => format!("map<{}, {}>", arg(0), arg(1)),
            _ => short.to_owned(),
        };
    }
    match short {
        "UTF8Type" => "text",
        "AsciiType" => "ascii",
        "LongType" => "bigint",
        "Int32Type" => "int",
        "DoubleType" => "double",
        "FloatType" => "float",
        "BooleanType" => "boolean",
        "TimestampType" | "DateType" => "timestamp",
        "DecimalType" => "decimal",
        "BytesType" => "blob",
        "UUIDType" => "uuid",
        "TimeUUIDType" => "timeuuid",
        "IntegerType" => "varint",
        "InetAddressType" => "inet",
        "CounterColumnType" => "counter",
        other => other,
    }
    .to_owned()
}

/// Splits `a,b(c,d),e` at top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// One column spec of a rows metadata block, kept as raw type bytes.
struct ColSpec {
    table: Option<(String, String)>,
    name: String,
    ty: Vec<u8>,
}

/// A rows metadata block (of a ROWS result, or a PREPARED result's result metadata).
struct Meta {
    flags: i32,
    paging_state: Option<Vec<u8>>,
    global: Option<(String, String)>,
    columns: Vec<ColSpec>,
    column_count: i32,
}

/// A decoded ROWS result.
struct Rows {
    meta: Meta,
    rows: Vec<Vec<Option<Vec<u8>>>>,
}

/// Skips one `[option]` (a type), returning its bytes.
fn read_type(r: &mut Reader<'_>) -> Result<(), FrameError> {
    match r.u16()? {
        0x0000 => {
            r.string()?;
        }
        0x0020 | 0x0022 => read_type(r)?,
        0x0021 => {
            read_type(r)?;
            read_type(r)?;
        }
        0x0030 => {
            r.string()?;
            r.string()?;
            for _ in 0..r.u16()? {
                r.string()?;
                read_type(r)?;
            }
        }
        0x0031 => {
            for _ in 0..r.u16()? {
                read_type(r)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn parse_meta(r: &mut Reader<'_>) -> Result<Meta, FrameError> {
    let flags = r.i32()?;
    let column_count = r.i32()?;
    let paging_state = if flags & META_HAS_MORE_PAGES != 0 {
        r.bytes()?
    } else {
        None
    };
    let mut global = None;
    let mut columns = Vec::new();
    if flags & META_NO_METADATA == 0 {
        if flags & META_GLOBAL_SPEC != 0 {
            global = Some((r.string()?, r.string()?));
        }
        for _ in 0..column_count {
            let table = if global.is_none() {
                Some((r.string()?, r.string()?))
            } else {
                None
            };
            let name = r.string()?;
            let before = r.rest();
            read_type(r)?;
            let ty = before[..before.len() - r.rest().len()].to_vec();
            columns.push(ColSpec { table, name, ty });
        }
    }
    Ok(Meta {
        flags,
        paging_state,
        global,
        columns,
        column_count,
    })
}

fn encode_meta(w: &mut Writer, m: &Meta) {
    w.i32(m.flags);
    w.i32(m.column_count);
    if m.flags & META_HAS_MORE_PAGES != 0 {
        w.bytes(m.paging_state.as_deref());
    }
    if m.flags & META_NO_METADATA == 0 {
        if let Some((ks, t)) = &m.global {
            w.string(ks);
            w.string(t);
        }
        for c in &m.columns {
            if let Some((ks, t)) = &c.table {
                w.string(ks);
                w.string(t);
            }
            w.string(&c.name);
            w.buf.extend_from_slice(&c.ty);
        }
    }
}

/// Inserts the `rpc_address inet` column spec at `at` (clamped); returns the index used.
fn insert_rpc_spec(m: &mut Meta, at: usize) -> usize {
    let at = at.min(usize::try_from(m.column_count).unwrap_or(0));
    m.column_count += 1;
    if m.flags & META_NO_METADATA == 0 {
        let table = m.columns.first().and_then(|c| c.table.clone());
        let spec = ColSpec {
            table,
            name: "rpc_address".to_owned(),
            ty: 0x0010u16.to_be_bytes().to_vec(),
        };
        m.columns.insert(at.min(m.columns.len()), spec);
    }
    at
}

fn parse_rows(body: &[u8]) -> Result<Rows, FrameError> {
    let mut r = Reader::new(body);
    let _kind = r.i32()?;
    let meta = parse_meta(&mut r)?;
    let n = r.i32()?;
    let width = usize::try_from(meta.column_count)
        .map_err(|_| FrameError::NegativeLength(meta.column_count))?;
    let mut rows = Vec::new();
    for _ in 0..n.max(0) {
        let mut row = Vec::with_capacity(width);
        for _ in 0..width {
            row.push(r.bytes()?);
        }
        rows.push(row);
    }
    Ok(Rows { meta, rows })
}

fn encode_rows(rows: &Rows) -> Vec<u8> {
    let mut w = Writer::default();
    w.i32(RESULT_ROWS);
    encode_meta(&mut w, &rows.meta);
    w.i32(i32::try_from(rows.rows.len()).unwrap_or(i32::MAX));
    for row in &rows.rows {
        for v in row {
            w.bytes(v.as_deref());
        }
    }
    w.buf
}

/// Applies a rows fix to a RESULT body; other result kinds pass unchanged.
fn fix_rows(body: Vec<u8>, fix: &Fix, rpc: IpAddr) -> Result<Vec<u8>, AdapterError> {
    if body.len() < 4 || i32::from_be_bytes([body[0], body[1], body[2], body[3]]) != RESULT_ROWS {
        return Ok(body);
    }
    let mut rows = parse_rows(&body)?;
    match fix {
        Fix::SchemaColumns => {
            for row in &mut rows.rows {
                if let Some(Some(kind)) = row.get_mut(1) {
                    let k = kind_of_21(&String::from_utf8_lossy(kind)).to_owned();
                    *kind = k.into_bytes();
                }
                if let Some(Some(ty)) = row.get_mut(2) {
                    *ty = cql_of_validator(&String::from_utf8_lossy(ty)).into_bytes();
                }
            }
        }
        Fix::RpcAddress(at) => {
            let at = insert_rpc_spec(&mut rows.meta, *at);
            let addr = match rpc {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            for row in &mut rows.rows {
                row.insert(at.min(row.len()), Some(addr.clone()));
            }
        }
        Fix::None | Fix::Prepared(_) => return Ok(body),
    }
    Ok(encode_rows(&rows))
}

/// A v3 PREPARED result as v4: `pk_count = 0` added to the bind metadata, and the result
/// metadata fixed like the rows will be (the driver may execute without metadata and
/// rely on it). Returns the body and the prepared id.
fn fix_prepared(body: Vec<u8>, rows: &Fix) -> Result<(Vec<u8>, Vec<u8>), AdapterError> {
    let mut r = Reader::new(&body);
    if r.i32()? != RESULT_PREPARED {
        return Ok((body, Vec::new()));
    }
    let id = r.short_bytes()?;
    let bind = parse_meta(&mut r)?;
    let mut result = parse_meta(&mut r)?;
    if let Fix::RpcAddress(at) = rows {
        insert_rpc_spec(&mut result, *at);
    }
    let mut w = Writer::default();
    w.i32(RESULT_PREPARED);
    w.short_bytes(&id);
    // v4 bind metadata: <flags><columns_count><pk_count>[<pk_index>…]<specs>.
    let mut b = Writer::default();
    encode_meta(&mut b, &bind);
    w.buf.extend_from_slice(&b.buf[..8]);
    w.i32(0);
    w.buf.extend_from_slice(&b.buf[8..]);
    encode_meta(&mut w, &result);
    w.buf.extend_from_slice(r.rest());
    Ok((w.buf, id))
}

/// Rewrites the `[long string]` query at the start of a QUERY/PREPARE body.
fn fix_query(body: &[u8]) -> Result<Option<(Vec<u8>, Fix)>, AdapterError> {
    let mut r = Reader::new(body);
    let q = r.long_string()?;
    let Some((q2, fix)) = rewrite(&q) else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(body.len() + 16);
    out.extend_from_slice(&i32::try_from(q2.len()).unwrap_or(i32::MAX).to_be_bytes());
    out.extend_from_slice(q2.as_bytes());
    out.extend_from_slice(r.rest());
    Ok(Some((out, fix)))
}

/// STARTUP with `CQL_VERSION` set to what 2.1 accepts.
fn fix_startup(body: &[u8]) -> Result<Vec<u8>, AdapterError> {
    let mut m = Reader::new(body).string_map()?;
    m.insert("CQL_VERSION".to_owned(), CQL_VERSION_21.to_owned());
    let mut w = Writer::default();
    w.u16(u16::try_from(m.len()).unwrap_or(u16::MAX));
    let mut keys: Vec<_> = m.into_iter().collect();
    keys.sort();
    for (k, v) in keys {
        w.string(&k);
        w.string(&v);
    }
    Ok(w.buf)
}

/// One frame as read off a socket.
struct Frame {
    header: [u8; HEADER_LEN],
    body: Vec<u8>,
}

impl Frame {
    fn stream(&self) -> i16 {
        i16::from_be_bytes([self.header[2], self.header[3]])
    }

    fn opcode(&self) -> u8 {
        self.header[4]
    }

    fn bytes(mut self) -> Vec<u8> {
        let len = u32::try_from(self.body.len()).unwrap_or(u32::MAX);
        self.header[5..9].copy_from_slice(&len.to_be_bytes());
        let mut out = self.header.to_vec();
        out.append(&mut self.body);
        out
    }
}

async fn read_frame(s: &mut (impl AsyncReadExt + Unpin)) -> Result<Option<Frame>, AdapterError> {
    let mut header = [0u8; HEADER_LEN];
    match s.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io("read frame header")(e)),
    }
    let len = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
    if len > MAX_BODY_LEN {
        return Err(AdapterError::Unsupported(format!(
            "frame body of {len} bytes"
        )));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .await
        .map_err(io("read frame body"))?;
    Ok(Some(Frame { header, body }))
}

/// State shared by all connections: prepared ids whose rows need fixing.
#[derive(Default)]
struct Shared {
    prepared: Mutex<HashMap<Vec<u8>, Fix>>,
    /// `PLEXUS_CQL_ADAPTER_TRACE` set: every request and error answer goes to stderr.
    trace: bool,
}

/// A request's opcode and, for QUERY/PREPARE, its text (for tracing).
fn describe(f: &Frame) -> String {
    let text = match f.opcode() {
        opcode::QUERY | opcode::PREPARE => Reader::new(&f.body).long_string().unwrap_or_default(),
        _ => String::new(),
    };
    format!("stream {} opcode {:#04x} {text}", f.stream(), f.opcode())
}

/// Pending answers of one connection, by stream id.
type Pending = Arc<Mutex<HashMap<i16, Fix>>>;

async fn client_to_server(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    pending: Pending,
    shared: Arc<Shared>,
) -> Result<(), AdapterError> {
    while let Some(mut f) = read_frame(&mut from).await? {
        if f.header[0] != 0x04 {
            return Err(AdapterError::Unsupported(format!(
                "client frame version {:#04x} (only v4 is adapted)",
                f.header[0]
            )));
        }
        if f.header[1] & FLAG_COMPRESSION != 0 {
            return Err(AdapterError::Unsupported("compressed frames".to_owned()));
        }
        f.header[0] = 0x03;
        if shared.trace {
            eprintln!("cql adapter: -> {}", describe(&f));
        }
        let fix = match f.opcode() {
            opcode::STARTUP => {
                f.body = fix_startup(&f.body)?;
                Fix::None
            }
            opcode::QUERY => match fix_query(&f.body)? {
                Some((body, fix)) => {
                    f.body = body;
                    fix
                }
                None => Fix::None,
            },
            opcode::PREPARE => match fix_query(&f.body)? {
                Some((body, fix)) => {
                    f.body = body;
                    Fix::Prepared(Box::new(fix))
                }
                None => Fix::Prepared(Box::new(Fix::None)),
            },
            opcode::EXECUTE => {
                let id = Reader::new(&f.body).short_bytes()?;
                let map = shared
                    .prepared
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                map.get(&id).cloned().unwrap_or(Fix::None)
            }
            _ => Fix::None,
        };
        if fix != Fix::None {
            let mut p = pending.lock().unwrap_or_else(PoisonError::into_inner);
            p.insert(f.stream(), fix);
        }
        to.write_all(&f.bytes())
            .await
            .map_err(io("write to server"))?;
    }
    to.shutdown().await.map_err(io("close towards server"))?;
    Ok(())
}

async fn server_to_client(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    pending: Pending,
    shared: Arc<Shared>,
    rpc: IpAddr,
) -> Result<(), AdapterError> {
    while let Some(mut f) = read_frame(&mut from).await? {
        if f.header[0] != 0x83 {
            return Err(AdapterError::Unsupported(format!(
                "server frame version {:#04x} (expected v3)",
                f.header[0]
            )));
        }
        f.header[0] = 0x84;
        if shared.trace && f.opcode() == opcode::ERROR {
            eprintln!(
                "cql adapter: <- stream {} ERROR {}",
                f.stream(),
                String::from_utf8_lossy(&f.body)
            );
        }
        let fix = {
            let mut p = pending.lock().unwrap_or_else(PoisonError::into_inner);
            p.remove(&f.stream())
        };
        if let Some(fix) = fix
            && f.opcode() == opcode::RESULT
        {
            f.body = match fix {
                Fix::Prepared(rows) => {
                    let (body, id) = fix_prepared(f.body, &rows)?;
                    if *rows != Fix::None && !id.is_empty() {
                        let mut map = shared
                            .prepared
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        map.insert(id, *rows);
                    }
                    body
                }
                other => fix_rows(f.body, &other, rpc)?,
            };
        }
        to.write_all(&f.bytes())
            .await
            .map_err(io("write to client"))?;
    }
    to.shutdown().await.map_err(io("close towards client"))?;
    Ok(())
}

async fn serve_one(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>, rpc: IpAddr) {
    let server = match TcpStream::connect(upstream).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cql adapter: cannot reach {upstream}: {e}");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let pending = Pending::default();
    let up = client_to_server(cr, sw, Arc::clone(&pending), Arc::clone(&shared));
    let down = server_to_client(sr, cw, pending, shared, rpc);
    // Either direction ending (or failing) ends the connection.
    let res = tokio::select! {
        r = up => r,
        r = down => r,
    };
    if let Err(e) = res {
        eprintln!("cql adapter: connection closed: {e}");
    }
}

/// A running adapter: listens on a loopback address and forwards to one v3 server.
pub struct V4Adapter {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for V4Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V4Adapter")
            .field("addr", &self.addr)
            .finish()
    }
}

impl V4Adapter {
    /// Listens on `listen` (port 0 picks one) and forwards every connection to `upstream`.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> Result<Self, AdapterError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cql-adapter")
            .enable_all()
            .build()
            .map_err(io("start runtime"))?;
        let listener = rt
            .block_on(TcpListener::bind(listen))
            .map_err(io("bind listen address"))?;
        let addr = listener.local_addr().map_err(io("listen address"))?;
        let (stop, mut stopped) = oneshot::channel();
        let shared = Arc::new(Shared {
            trace: std::env::var_os("PLEXUS_CQL_ADAPTER_TRACE").is_some(),
            ..Shared::default()
        });
        let thread = std::thread::Builder::new()
            .name("cql-adapter-accept".to_owned())
            .spawn(move || {
                rt.block_on(async move {
                    loop {
                        tokio::select! {
                            _ = &mut stopped => break,
                            accepted = listener.accept() => match accepted {
                                Ok((client, _)) => {
                                    tokio::spawn(serve_one(client, upstream, Arc::clone(&shared), addr.ip()));
                                }
                                Err(e) => eprintln!("cql adapter: accept: {e}"),
                            },
                        }
                    }
                });
            })
            .map_err(io("spawn adapter thread"))?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address drivers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until the adapter stops (it stops only when dropped from another thread or
    /// when the process ends).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for V4Adapter {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends STARTUP and one query as a v4 client; `Ok` when the server answered with rows.
/// Used by `up.sh` to wait until Cassandra serves queries through the adapter.
pub fn probe(addr: SocketAddr, timeout: std::time::Duration) -> Result<(), AdapterError> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(io("connect"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(io("set timeout"))?;
    let frame = |stream: i16, op: u8, body: &[u8]| {
        let mut f = vec![0x04, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.push(op);
        f.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
        f.extend_from_slice(body);
        f
    };
    let read = |s: &mut std::net::TcpStream| -> Result<(u8, Vec<u8>), AdapterError> {
        let mut h = [0u8; HEADER_LEN];
        s.read_exact(&mut h).map_err(io("read answer"))?;
        let len = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) as usize;
        let mut body = vec![0u8; len.min(MAX_BODY_LEN)];
        s.read_exact(&mut body).map_err(io("read answer body"))?;
        Ok((h[4], body))
    };
    let mut w = Writer::default();
    w.u16(1);
    w.string("CQL_VERSION");
    w.string("3.0.0");
    s.write_all(&frame(1, opcode::STARTUP, &w.buf))
        .map_err(io("send STARTUP"))?;
    let (op, body) = read(&mut s)?;
    if op != opcode::READY {
        return Err(AdapterError::Unsupported(format!(
            "STARTUP answered with opcode {op:#04x}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    let q = "SELECT release_version FROM system.local WHERE key='local'";
    let mut w = Writer::default();
    w.i32(i32::try_from(q.len()).unwrap_or(i32::MAX));
    w.buf.extend_from_slice(q.as_bytes());
    w.u16(0x0001); // consistency ONE
    w.u8(0); // no flags
    s.write_all(&frame(2, opcode::QUERY, &w.buf))
        .map_err(io("send QUERY"))?;
    let (op, body) = read(&mut s)?;
    let rows = op == opcode::RESULT && body.get(..4) == Some(&RESULT_ROWS.to_be_bytes()[..]);
    if rows {
        Ok(())
    } else {
        Err(AdapterError::Unsupported(format!(
            "query answered with opcode {op:#04x}: {}",
            String::from_utf8_lossy(&body)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_query_drops_rpc_address() {
        let (q, fix) = rewrite(
            "SELECT host_id, rpc_address, data_center, rack, tokens, cluster_name FROM system.local WHERE key='local'",
        )
        .expect("rewritten");
        assert_eq!(
            q,
            "SELECT host_id, data_center, rack, tokens, cluster_name FROM system.local WHERE key='local'"
        );
        assert_eq!(fix, Fix::RpcAddress(1));
        assert!(rewrite("SELECT schema_version FROM system.local WHERE key='local'").is_none());
        assert!(rewrite("SELECT rowid FROM \"ks\".\"t\"").is_none());
    }

    #[test]
    fn schema_reads_go_to_the_21_tables() {
        let (q, fix) = rewrite(
            "SELECT column_name, kind, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
        )
        .expect("rewritten");
        assert!(
            q.contains("system.schema_columns") && q.contains("columnfamily_name"),
            "{q}"
        );
        assert_eq!(fix, Fix::SchemaColumns);
        let (q, _) = rewrite("SELECT keyspace_name FROM system_schema.keyspaces").expect("ks");
        assert_eq!(q, "SELECT keyspace_name FROM system.schema_keyspaces");
    }

    #[test]
    fn validators_become_cql_types() {
        let m = "org.apache.cassandra.db.marshal.";
        assert_eq!(cql_of_validator(&format!("{m}LongType")), "bigint");
        assert_eq!(
            cql_of_validator(&format!("{m}ReversedType({m}Int32Type)")),
            "int"
        );
        assert_eq!(
            cql_of_validator(&format!("{m}MapType({m}UTF8Type,{m}DecimalType)")),
            "map<text, decimal>"
        );
        assert_eq!(kind_of_21("clustering_key"), "clustering");
    }

    #[test]
    fn rows_round_trip_and_gain_a_column() {
        let mut w = Writer::default();
        w.i32(RESULT_ROWS);
        w.i32(META_GLOBAL_SPEC);
        w.i32(1);
        w.string("system");
        w.string("local");
        w.string("host_id");
        w.u16(0x000C);
        w.i32(1);
        w.bytes(Some(&[7u8; 16]));
        let body = w.buf;
        assert_eq!(encode_rows(&parse_rows(&body).expect("parse")), body);
        let fixed =
            fix_rows(body, &Fix::RpcAddress(1), "127.0.0.1".parse().expect("ip")).expect("fix");
        let rows = parse_rows(&fixed).expect("parse fixed");
        assert_eq!(rows.meta.column_count, 2);
        assert_eq!(rows.meta.columns[1].name, "rpc_address");
        assert_eq!(rows.rows[0][1].as_deref(), Some(&[127u8, 0, 0, 1][..]));
    }
}
