//! Protocol-v4 adapter in front of a v3-only Cassandra (2.1), for tests:
//! `cql-v4-adapter --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT`, or
//! `cql-v4-adapter --probe 127.0.0.1:PORT` (exit 0 once a query works through it).
//!
//! Prints `listening on ADDR` once ready and serves until killed.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use plexus_testkit::cql::adapter::{V4Adapter, probe};

fn addr(v: Option<String>, flag: &str) -> anyhow::Result<SocketAddr> {
    let v = v.with_context(|| format!("{flag} needs an address"))?;
    v.parse().with_context(|| format!("bad {flag} address {v}"))
}

fn main() -> anyhow::Result<()> {
    let mut listen: SocketAddr = "127.0.0.1:0".parse().context("default address")?;
    let mut upstream = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = addr(args.next(), "--listen")?,
            "--upstream" => upstream = Some(addr(args.next(), "--upstream")?),
            "--probe" => {
                let target = addr(args.next(), "--probe")?;
                probe(target, Duration::from_secs(5))
                    .with_context(|| format!("probing {target}"))?;
                println!("{target} answers");
                return Ok(());
            }
            "-h" | "--help" => {
                println!("usage: cql-v4-adapter --listen ADDR --upstream ADDR | --probe ADDR");
                return Ok(());
            }
            other => bail!("unknown argument {other}; try --help"),
        }
    }
    let upstream = upstream.context("--upstream is required")?;
    let adapter = V4Adapter::start(listen, upstream).context("starting the adapter")?;
    println!("listening on {} (upstream {upstream})", adapter.addr());
    std::io::Write::flush(&mut std::io::stdout()).context("flushing stdout")?;
    adapter.wait();
    Ok(())
}
