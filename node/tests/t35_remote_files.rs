//! The file-access layer against moto's S3 server on loopback: a multipart upload read back
//! by an independent client (boto3), streamed and ranged reads, an abandoned upload that
//! leaves no object, clear not-found and access-denied errors, and reading a large object
//! without holding it in memory; and against the testkit HTTP server: a body cut short is
//! resumed by a `Range` request.

use std::io::{Read as _, Write as _};

use anyhow::{Context as _, Result, ensure};
use plexus_node::remote::{FileAccess, FileSettings, S3Credentials};
use plexus_testkit::remote::MotoS3;

const BUCKET: &str = "plexus-files";

fn access(s3: &MotoS3, secret: &str) -> FileAccess {
    FileAccess::new(FileSettings {
        s3_endpoint: Some(s3.endpoint.clone()),
        s3_region: Some("us-east-1".into()),
        s3_credentials: Some(S3Credentials {
            key_id: s3.key_id.clone(),
            secret: secret.to_owned(),
        }),
        multipart_chunk_mib: 5,
        retries: 1,
        ..FileSettings::default()
    })
}

/// Deterministic bytes that do not compress to nothing.
fn data(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn s3_multipart_streamed_ranged_and_errors() -> Result<()> {
    let Some(s3) = MotoS3::start()? else {
        return Ok(());
    };
    s3.make_bucket(BUCKET)?;
    let files = access(&s3, &s3.secret);
    let tmp = tempfile::tempdir()?;

    // 12 MiB in 5 MiB parts: a real multipart upload; boto3 reads back the same bytes.
    let want = data(12 * 1024 * 1024 + 123);
    let url = format!("s3://{BUCKET}/out/big.bin");
    let mut w = files.create(&url)?;
    for piece in want.chunks(300_000) {
        w.write_all(piece)?;
    }
    w.finish()?;
    let copy = tmp.path().join("big.bin");
    s3.get(BUCKET, "out/big.bin", &copy)?;
    ensure!(std::fs::read(&copy)? == want, "boto3 read other bytes");

    let mut got = Vec::new();
    files.open_read(&url)?.read_to_end(&mut got)?;
    ensure!(got == want, "streamed read differs");
    let ranged = files.open_ranged(&url)?;
    ensure!(ranged.len() == want.len() as u64, "length {}", ranged.len());
    let tail = ranged.read_range(want.len() as u64 - 1000, 4000)?;
    ensure!(tail[..] == want[want.len() - 1000..], "ranged read differs");

    // A sink dropped before finish leaves no object behind.
    let gone = format!("s3://{BUCKET}/out/abandoned.bin");
    let mut w = files.create(&gone)?;
    w.write_all(&want[..6 * 1024 * 1024])?;
    drop(w);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let err = files.open_read(&gone).err().map(|e| e.to_string());
    ensure!(
        err.as_deref()
            .is_some_and(|e| e.contains("not found") && e.contains(&gone)),
        "abandoned upload: {err:?}"
    );

    // A wrong secret: access denied, naming the URL and not the secret.
    let wrong = "not-the-secret-42";
    let err = access(&s3, wrong)
        .open_read(&url)
        .err()
        .map(|e| e.to_string())
        .context("a wrong secret must fail")?;
    ensure!(
        err.contains("access denied") && err.contains(&url) && !err.contains(wrong),
        "{err}"
    );
    ensure!(
        !format!("{:?}", access(&s3, wrong)).contains(wrong),
        "Debug shows the secret"
    );

    // Streaming: reading a 48 MiB object raises the peak RSS by far less than its size.
    let big = data(48 * 1024 * 1024);
    let big_url = format!("s3://{BUCKET}/in/large.bin");
    let mut w = files.create(&big_url)?;
    for piece in big.chunks(1 << 20) {
        w.write_all(piece)?;
    }
    w.finish()?;
    drop(big);
    if let Some(before) = plexus_testkit::usage::peak_rss_bytes() {
        let mut r = files.open_read(&big_url)?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0usize;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n;
        }
        ensure!(total == 48 * 1024 * 1024, "read {total} bytes");
        let after = plexus_testkit::usage::peak_rss_bytes().unwrap_or(before);
        ensure!(
            after.saturating_sub(before) < 16 * 1024 * 1024,
            "peak RSS rose by {} MiB reading a 48 MiB object",
            after.saturating_sub(before) >> 20
        );
    }
    Ok(())
}

/// Benchmark (bench/RESULTS.md): one CSV of `PLEXUS_BENCH_ROWS` rows (default 10 M) read
/// through the file_table reader (parse + cell conversion) from local disk and from moto's S3
/// server on loopback. `cargo test --release -p plexus-node --test t35_remote_files --
/// --ignored --nocapture bench_csv`.
#[test]
#[ignore = "benchmark: run it in release"]
fn bench_csv_read_s3_vs_local() -> Result<()> {
    use std::time::Instant;

    let Some(s3) = MotoS3::start()? else {
        return Ok(());
    };
    s3.make_bucket(BUCKET)?;
    let rows: u64 = std::env::var("PLEXUS_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let tmp = tempfile::tempdir()?;
    let local = tmp.path().join("rows.csv");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&local)?);
        writeln!(w, "id,qty,price,name")?;
        for i in 0..rows {
            writeln!(
                w,
                "{i},{},{}.{:02},item_{}",
                i * 7 % 1000,
                i % 5000,
                i % 100,
                i % 9973
            )?;
        }
    }
    let size = std::fs::metadata(&local)?.len();
    // The test installs the process-wide access (the readers use it) with the moto key.
    ensure!(
        access(&s3, &s3.secret).install(),
        "file access already installed"
    );
    let files = FileAccess::global();
    let url = format!("s3://{BUCKET}/bench/rows.csv");
    let start = Instant::now();
    let mut w = files.create(&url)?;
    std::io::copy(&mut std::fs::File::open(&local)?, &mut w)?;
    w.finish()?;
    let upload = start.elapsed();

    let dirs = plexus_node::files::ProtoDirs {
        in_dir: tmp.path().to_string_lossy().into_owned(),
        out_dir: tmp.path().to_string_lossy().into_owned(),
    };
    let script = plexus_node::files::proto_script_csv(&local, 0, 1, ",", &dirs)?;
    let script_path = tmp.path().join("script.json");
    std::fs::write(&script_path, serde_json::to_string(&script)?)?;
    let plan = plexus_node::script_files::build_plan(&script_path.to_string_lossy(), None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(plexus_core::plan::Reader::File(reader)) =
        plan.node("read_file").map(|n| n.reader.clone())
    else {
        anyhow::bail!("no file reader");
    };
    let read = |u: &str| -> Result<(u64, f64)> {
        let start = Instant::now();
        let mut src = plexus_node::files::open_source(&reader, u)?;
        let mut chunk = Vec::new();
        let mut n = 0u64;
        loop {
            let k = src.next_chunk(&mut chunk, 1000)?;
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        Ok((n, start.elapsed().as_secs_f64()))
    };
    let (n_local, t_local) = read(&local.to_string_lossy())?;
    let hwm_before = plexus_testkit::usage::peak_rss_bytes().unwrap_or(0);
    let (n_s3, t_s3) = read(&url)?;
    let hwm_rise = plexus_testkit::usage::peak_rss_bytes()
        .unwrap_or(0)
        .saturating_sub(hwm_before);
    ensure!(n_local == rows && n_s3 == rows, "rows {n_local} / {n_s3}");
    println!(
        "csv {rows} rows, {:.0} MB: local disk {:.2} s = {:.0} rows/s ({:.0} MB/s); \
         S3 (moto, loopback) {:.2} s = {:.0} rows/s ({:.0} MB/s), peak RSS +{} MiB; \
         upload {:.1} s ({:.0} MB/s)",
        size as f64 / 1e6,
        t_local,
        rows as f64 / t_local,
        size as f64 / 1e6 / t_local,
        t_s3,
        rows as f64 / t_s3,
        size as f64 / 1e6 / t_s3,
        hwm_rise >> 20,
        upload.as_secs_f64(),
        size as f64 / 1e6 / upload.as_secs_f64()
    );
    Ok(())
}

/// A connection dropped in the middle of an http body is resumed from the byte where it broke
/// (a `Range` GET) within the same read; with retries off, the read fails as retryable.
#[test]
fn http_read_resumes_after_a_dropped_connection() -> Result<()> {
    use plexus_testkit::remote::HttpFiles;
    let dir = tempfile::tempdir()?;
    let want = data(3 * 1024 * 1024 + 7);
    std::fs::write(dir.path().join("f.bin"), &want)?;
    let srv = HttpFiles::start(dir.path(), false)?;
    srv.drop_connection("f.bin", 1_000_000, 1);
    let files = FileAccess::new(FileSettings::default());
    let mut got = Vec::new();
    files.open_read(&srv.url("f.bin"))?.read_to_end(&mut got)?;
    ensure!(got == want, "resumed read differs ({} bytes)", got.len());
    ensure!(
        srv.dropped() == 1 && srv.gets("f.bin") == 2,
        "gets {}",
        srv.gets("f.bin")
    );

    srv.drop_connection("f.bin", 1_000_000, 1);
    let no_retries = FileAccess::new(FileSettings {
        retries: 0,
        ..FileSettings::default()
    });
    let err = no_retries
        .open_read(&srv.url("f.bin"))?
        .read_to_end(&mut Vec::new())
        .err()
        .context("a dropped connection without retries must fail")?;
    ensure!(
        plexus_node::remote::io_is_retryable(&err),
        "not retryable: {err}"
    );
    Ok(())
}
