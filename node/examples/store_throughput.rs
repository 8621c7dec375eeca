//! Throughput of the embedded store (a measurement, not a test).
//!
//! Writes 1,000,000 rows of ~60 bytes with one unique and one non-unique index in write
//! batches, then does 1,000,000 unique lookups (+ row fetches) and non-unique lookups in
//! batches of keys, and scans the table in 4 batches. Prints rows/s or keys/s.
//!
//! `cargo run --release -p plexus-node --example store_throughput [-- ROWS BATCH THREADS [DIR]]`

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use plexus_node::store::{
    EmbeddedStore, IndexKind, IndexSpec, RowWrite, Share, Store, TableRef, TableSpec, WriteMode,
};

/// splitmix64: cheap, deterministic "hash" rowids over the whole i64 range.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 21-byte Capillaries int key (spec §6.2) for a non-negative number.
fn int_key(n: u64) -> Vec<u8> {
    format!("0{n:020}").into_bytes()
}

fn rate(n: u64, secs: f64) -> String {
    format!("{:>9.0}/s ({n} in {secs:.2} s)", n as f64 / secs)
}

/// Wall-clock and CPU time of one phase.
struct Phase {
    wall: Instant,
    cpu: f64,
}

impl Phase {
    fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: plexus_testkit::usage::cpu_seconds(),
        }
    }

    /// "N/s (n in s) [cpu s]" for n items.
    fn report(&self, n: u64) -> String {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = plexus_testkit::usage::cpu_seconds() - self.cpu;
        format!("{} [cpu {cpu:.2} s]", rate(n, wall))
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(Ok(1_000_000), |a| a.parse())?;
    let batch: u64 = args.get(2).map_or(Ok(5_000), |a| a.parse())?;
    let threads: u64 = args.get(3).map_or(Ok(2), |a| a.parse())?;
    let tmp = tempfile::tempdir()?;
    let dir: PathBuf = args
        .get(4)
        .filter(|d| !d.is_empty())
        .map_or_else(|| tmp.path().to_owned(), PathBuf::from);
    // "both" (default) or "nonunique": with "nonunique" the unique index is written as a
    // second non-unique one, to see what the duplicate check costs.
    let unique_kind = match args.get(5).map(String::as_str) {
        Some("nonunique") => IndexKind::NonUnique,
        _ => IndexKind::Unique,
    };
    let store = EmbeddedStore::open(&dir).context("open store")?;
    let ks = "bench";
    store.drop_keyspace(ks)?;
    store.create_keyspace(ks)?;
    let spec = TableSpec {
        data: TableRef::new("orders", 1),
        indexes: vec![
            IndexSpec {
                table: TableRef::new("idx_orders_id", 1),
                kind: unique_kind,
            },
            IndexSpec {
                table: TableRef::new("idx_orders_customer", 1),
                kind: IndexKind::NonUnique,
            },
        ],
        fields: None,
        table_options: String::new(),
    };
    store.create_table(ks, &spec)?;
    let customers = (n / 10).max(1);
    let make_row = |i: u64| {
        let mut row = format!("order {i:>10} customer {:>10} ", i % customers).into_bytes();
        row.extend_from_slice(&mix(i).to_le_bytes());
        row.extend_from_slice(&i.to_le_bytes());
        RowWrite {
            rowid: mix(i).cast_signed(),
            batch_idx: 0,
            row,
            keys: vec![int_key(i), int_key(i % customers)],
        }
    };

    // Ingest: `threads` writers, each writing its share in calls of `batch` rows.
    let phase = Phase::start();
    let written: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (store, spec, make_row) = (&store, &spec, &make_row);
                scope.spawn(move || -> Result<u64> {
                    let mut done = 0;
                    let mut start = t * batch;
                    while start < n {
                        let rows: Vec<RowWrite> =
                            (start..(start + batch).min(n)).map(make_row).collect();
                        let report =
                            store.write_rows(ks, spec, Share::WHOLE, &rows, WriteMode::Insert)?;
                        anyhow::ensure!(report.duplicates.is_empty(), "unexpected duplicates");
                        done += report.rows_written as u64;
                        start += threads * batch;
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .sum::<Result<u64>>()
    })?;
    println!(
        "ingest      {}  ({threads} threads, {batch} rows per write, ~60-byte rows, {})",
        phase.report(written),
        if unique_kind == IndexKind::Unique {
            "1 unique + 1 non-unique index"
        } else {
            "2 non-unique indexes"
        }
    );
    let phase = Phase::start();
    store.sync()?;
    println!("sync        {}", phase.report(1));
    if unique_kind == IndexKind::NonUnique || args.get(5).is_some_and(|m| m == "ingest") {
        return Ok(());
    }

    // Lookups: random keys in pages of 1000, as a lookup processor reads a left page.
    let page = 1000u64;
    let pages: Vec<Vec<Vec<u8>>> = (0..n.div_ceil(page))
        .map(|p| {
            (0..page)
                .map(|j| int_key(mix(p * page + j + (1 << 40)) % n))
                .collect()
        })
        .collect();
    let keys_total = n.div_ceil(page) * page;
    let phase = Phase::start();
    let mut rowid_pages = Vec::with_capacity(pages.len());
    for keys in &pages {
        let rowids = store.lookup_unique(ks, &spec.indexes[0].table, keys)?;
        rowid_pages.push(rowids.into_iter().flatten().collect::<Vec<i64>>());
    }
    println!("unique      {}", phase.report(keys_total));
    let phase = Phase::start();
    let mut found = 0u64;
    for ids in &rowid_pages {
        let rows = store.get_rows(ks, &spec.data, ids)?;
        found += rows.iter().flatten().count() as u64;
    }
    println!("get_rows    {}", phase.report(keys_total));
    anyhow::ensure!(found == keys_total, "found {found} of {keys_total}");

    let lookups = (n / 10).max(1);
    let pages: Vec<Vec<Vec<u8>>> = (0..lookups.div_ceil(page))
        .map(|p| {
            (0..page)
                .map(|j| int_key(mix(p * page + j + (1 << 41)) % customers))
                .collect()
        })
        .collect();
    let phase = Phase::start();
    let mut matched = 0u64;
    for keys in &pages {
        let rowids = store.lookup_non_unique(ks, &spec.indexes[1].table, keys)?;
        matched += rowids.iter().map(|r| r.len() as u64).sum::<u64>();
    }
    println!(
        "non-unique  {}  ({matched} rowids, 10 per key)",
        phase.report(lookups.div_ceil(page) * page)
    );

    let phase = Phase::start();
    let mut scanned = 0u64;
    for b in 0..4 {
        let mut resume = None;
        loop {
            let page = store.scan_batch(ks, &spec.data, b, 4, 1000, resume)?;
            scanned += page.len() as u64;
            match page.resume_after {
                Some(r) => resume = Some(r),
                None => break,
            }
        }
    }
    anyhow::ensure!(scanned == n, "scanned {scanned} of {n}");
    println!(
        "scan        {}  (4 batches, pages of 1000)",
        phase.report(scanned)
    );
    Ok(())
}
