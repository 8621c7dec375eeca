//! Standalone CQL wire double: `cql-double --listen 127.0.0.1:9042`.
//!
//! Prints `listening on ADDR` once ready (so callers passing port 0 learn the port) and
//! serves until killed.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use plexus_testkit::cql::CqlDouble;

fn main() -> anyhow::Result<()> {
    let mut listen: SocketAddr = "127.0.0.1:9042".parse().context("default address")?;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                let v = args.next().context("--listen needs an address")?;
                listen = v
                    .parse()
                    .with_context(|| format!("bad --listen address {v}"))?;
            }
            "-h" | "--help" => {
                println!("usage: cql-double [--listen ADDR]   (default 127.0.0.1:9042)");
                return Ok(());
            }
            other => bail!("unknown argument {other}; try --help"),
        }
    }
    let double = CqlDouble::start_on(listen).context("starting the CQL double")?;
    println!("listening on {}", double.addr());
    // Tests read this line to learn the port, so it must not sit in a buffer.
    std::io::Write::flush(&mut std::io::stdout()).context("flushing stdout")?;
    // The server runs on its own threads; this one only keeps the process alive until a
    // signal ends it.
    loop {
        std::thread::park();
    }
}
