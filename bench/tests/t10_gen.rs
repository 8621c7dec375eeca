//! The data generators: determinism, schemas, row counts, distributions at small scale,
//! Parquet read-back, file splitting and clone mode.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use plexus_bench::r#gen::{
    CloneParams, Format, GenError, LookupParams, PortfolioParams, Summary, lookup, portfolio,
    portfolio_clone,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn gen_lookup(out: &Path, items: u64, format: Format, files: u16, seed: u64) -> Result<Summary> {
    Ok(lookup(&LookupParams {
        items,
        out: out.to_path_buf(),
        format,
        files,
        seed,
    })?)
}

fn gen_portfolio(
    out: &Path,
    accounts: u64,
    format: Format,
    files: (u16, u16),
    seed: u64,
) -> Result<Summary> {
    Ok(portfolio(&PortfolioParams {
        accounts,
        out: out.to_path_buf(),
        format,
        txn_files: files.0,
        holding_files: files.1,
        seed,
    })?)
}

/// Every file of a directory by name.
fn dir_bytes(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        m.insert(
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read(e.path())?,
        );
    }
    Ok(m)
}

/// Header and rows of a CSV file without quoted cells (all generator output).
fn read_csv(path: &Path) -> Result<(String, Vec<Vec<String>>)> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let mut lines = text.lines();
    let header = lines.next().context("empty file")?.to_owned();
    let rows = lines
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect();
    Ok((header, rows))
}

/// Rows of `stem.csv` or of all `stem_NNNNN.csv`, with the part index of each row.
/// A CSV data row with the index of the file part it was read from.
type PartRow = (usize, Vec<String>);

fn read_parts(dir: &Path, stem: &str, k: usize) -> Result<(String, Vec<PartRow>)> {
    let mut header = String::new();
    let mut all = Vec::new();
    for i in 0..k {
        let name = if k == 1 {
            format!("{stem}.csv")
        } else {
            format!("{stem}_{i:05}.csv")
        };
        let (h, rows) = read_csv(&dir.join(name))?;
        header = h;
        all.extend(rows.into_iter().map(|r| (i, r)));
    }
    Ok((header, all))
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// `YYYY-MM-DD` → days since 1970-01-01.
fn date(s: &str) -> Result<i64> {
    ensure!(
        s.len() == 10 && &s[4..5] == "-" && &s[7..8] == "-",
        "bad date {s:?}"
    );
    Ok(days_from_civil(
        s[0..4].parse()?,
        s[5..7].parse()?,
        s[8..10].parse()?,
    ))
}

/// `YYYY-MM-DD HH:MM:SS` → Unix seconds; `None` for the zero time.
fn ts(s: &str) -> Result<Option<i64>> {
    if s == "0001-01-01 00:00:00" {
        return Ok(None);
    }
    ensure!(s.len() == 19 && &s[10..11] == " ", "bad timestamp {s:?}");
    let secs: i64 = s[11..13].parse::<i64>()? * 3600
        + s[14..16].parse::<i64>()? * 60
        + s[17..19].parse::<i64>()?;
    Ok(Some(date(&s[..10])? * 86_400 + secs))
}

/// Decimal text → cents.
fn cents(s: &str) -> Result<i64> {
    let (units, frac) = s.split_once('.').unwrap_or((s, ""));
    ensure!(frac.len() <= 2, "more than 2 decimals: {s:?}");
    let f = format!("{frac:0<2}");
    Ok(units.parse::<i64>()? * 100 + f.parse::<i64>()?)
}

fn is_hex32(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// All rows of a Parquet file as `(column name, field)` lists.
fn read_parquet(path: &Path) -> Result<Vec<Vec<(String, Field)>>> {
    let reader = SerializedFileReader::new(File::open(path)?)?;
    let mut rows = Vec::new();
    for row in reader.get_row_iter(None)? {
        let row = row?;
        rows.push(
            row.get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect(),
        );
    }
    Ok(rows)
}

/// A Parquet field in the generator's CSV text form (2-decimal-trimmed cents, timestamps).
fn field_text(f: &Field, pad: usize) -> Result<String> {
    Ok(match f {
        Field::Str(s) => s.clone(),
        Field::Long(v) => format!("{v:0pad$}"),
        Field::Null => "0001-01-01 00:00:00".to_owned(),
        Field::Decimal(d) => {
            let bytes: [u8; 8] = d.data().try_into()?;
            let c = i64::from_be_bytes(bytes);
            let s = format!("{}.{:02}", c / 100, c % 100);
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        Field::TimestampMillis(ms) => {
            let secs = ms / 1000;
            let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            // Days back to a civil date by search around the estimate (test-only, small data).
            let mut y = 1970 + days / 366;
            while days_from_civil(y + 1, 1, 1) <= days {
                y += 1;
            }
            let mut m = 1;
            while m < 12 && days_from_civil(y, m + 1, 1) <= days {
                m += 1;
            }
            let d = days - days_from_civil(y, m, 1) + 1;
            format!(
                "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
                rem / 3600,
                rem / 60 % 60,
                rem % 60
            )
        }
        other => bail!("unexpected field {other:?}"),
    })
}

fn assert_share(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got:.4}, want {want} ± {tol}"
    );
}

// ---------------------------------------------------------------------------------------------
// lookup
// ---------------------------------------------------------------------------------------------

#[test]
fn lookup_same_seed_same_bytes_other_seed_differs() -> Result<()> {
    let t = tempfile::tempdir()?;
    for format in [Format::Csv, Format::Parquet] {
        let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
        gen_lookup(&a, 3000, format, 2, 7)?;
        gen_lookup(&b, 3000, format, 2, 7)?;
        gen_lookup(&c, 3000, format, 2, 8)?;
        let (da, db, dc) = (dir_bytes(&a)?, dir_bytes(&b)?, dir_bytes(&c)?);
        assert_eq!(da.len(), 4);
        assert_eq!(da, db, "{format:?}: same seed must give the same bytes");
        for (name, bytes) in &da {
            assert_ne!(
                Some(bytes),
                dc.get(name),
                "{format:?} {name}: other seed, same bytes"
            );
        }
        std::fs::remove_dir_all(&a)?;
        std::fs::remove_dir_all(&b)?;
        std::fs::remove_dir_all(&c)?;
    }
    Ok(())
}

#[test]
fn lookup_headers_are_the_conformance_headers() -> Result<()> {
    let t = tempfile::tempdir()?;
    gen_lookup(t.path(), 10, Format::Csv, 1, 1)?;
    let Some(conf) = plexus_testkit::conformance::conformance(env!("CARGO_MANIFEST_DIR"))? else {
        return Ok(());
    };
    let conf = conf.input("lookup");
    for name in ["olist_orders_dataset.csv", "olist_order_items_dataset.csv"] {
        let (ours, _) = read_csv(&t.path().join(name))?;
        let (theirs, _) = read_csv(&conf.join(name))?;
        assert_eq!(ours, theirs, "{name}");
    }
    Ok(())
}

#[test]
fn lookup_rows_formats_and_distributions() -> Result<()> {
    let t = tempfile::tempdir()?;
    let n = 20_000;
    let summary = gen_lookup(t.path(), n, Format::Csv, 1, 3)?;
    let (_, orders) = read_csv(&t.path().join("olist_orders_dataset.csv"))?;
    let (_, items) = read_csv(&t.path().join("olist_order_items_dataset.csv"))?;
    assert_eq!(items.len() as u64, n);
    assert_eq!(summary.rows("olist_order_items_dataset"), Some(n));
    assert_eq!(
        summary.rows("olist_orders_dataset"),
        Some(orders.len() as u64)
    );
    // 0..=4 items per order: about n / 2 orders.
    assert_share("orders per item", orders.len() as f64 / n as f64, 0.5, 0.03);

    let base = date("2016-01-01")? * 86_400;
    let mut estimated = HashMap::new();
    let mut statuses: BTreeMap<String, u32> = BTreeMap::new();
    for o in &orders {
        assert_eq!(o.len(), 8);
        assert!(is_hex32(&o[0]) && is_hex32(&o[1]), "{o:?}");
        *statuses.entry(o[2].clone()).or_default() += 1;
        let p = ts(&o[3])?.context("purchase is never zero")?;
        assert!((base..base + 100_000_000).contains(&p));
        let approved = ts(&o[4])?;
        let carrier = ts(&o[5])?;
        let customer = ts(&o[6])?;
        let est = ts(&o[7])?.context("estimated is never zero")?;
        assert!((p..p + 100_000).contains(&est));
        if let Some(a) = approved {
            assert!((p..p + 10_000).contains(&a));
        }
        if let Some(c) = carrier {
            let a = approved.context("carrier without approval")?;
            assert!((a..a + 10_000).contains(&c));
        }
        if let Some(d) = customer {
            let c = carrier.context("delivery without carrier")?;
            assert!((c..c + 100_000).contains(&d));
        }
        let stage = match (approved, carrier, customer) {
            (None, None, None) => "invoiced",
            (Some(_), None, None) => "approved",
            (Some(_), Some(_), None) => "shipped",
            (Some(_), Some(_), Some(_)) => "delivered",
            _ => bail!("timestamps out of lifecycle order: {o:?}"),
        };
        assert!(
            o[2] == stage || o[2] == "canceled" || o[2] == "unavailable",
            "{o:?}"
        );
        assert!(
            estimated.insert(o[0].clone(), est).is_none(),
            "duplicate order id"
        );
    }
    let share = |s: &str| f64::from(statuses.get(s).copied().unwrap_or(0)) / orders.len() as f64;
    assert_share("delivered", share("delivered"), 0.9035, 0.015);
    assert_share("canceled", share("canceled"), 0.02, 0.006);
    assert_share("unavailable", share("unavailable"), 0.02, 0.006);
    for s in ["invoiced", "approved", "shipped"] {
        assert_share(s, share(s), 0.019, 0.006);
    }

    let mut per_order: HashMap<&str, Vec<i64>> = HashMap::new();
    let mut sellers = BTreeSet::new();
    let mut product_price: HashMap<&str, (&str, &str, &str)> = HashMap::new();
    for it in &items {
        assert_eq!(it.len(), 7);
        assert!(is_hex32(&it[2]) && is_hex32(&it[3]));
        assert_eq!(it[1].len(), 5, "order_item_id is %05d");
        per_order.entry(&it[0]).or_default().push(it[1].parse()?);
        let est = estimated.get(&it[0]).context("item of an unknown order")?;
        let lim = ts(&it[4])?.context("shipping limit is never zero")?;
        assert!((*est..est + 100_000).contains(&lim));
        let (price, freight) = (cents(&it[5])?, cents(&it[6])?);
        assert!((500..=29_999).contains(&price), "{it:?}");
        assert!((200..=4_999).contains(&freight), "{it:?}");
        // Go's shortest float text, as in the conformance inputs: no trailing zeros.
        for v in [&it[5], &it[6]] {
            assert!(!(v.contains('.') && v.ends_with('0')), "{v}");
        }
        sellers.insert(it[3].clone());
        let prev = product_price.insert(&it[2], (&it[3], &it[5], &it[6]));
        assert!(
            prev.is_none_or(|p| p == (&it[3], &it[5], &it[6])),
            "a product has one seller and price"
        );
    }
    assert!(
        sellers.len() <= 200 && sellers.len() > 150,
        "{} sellers",
        sellers.len()
    );
    for ids in per_order.values() {
        assert!((1..=4).contains(&ids.len()));
        assert_eq!(*ids, (1..=ids.len() as i64).collect::<Vec<_>>());
    }
    let empty = orders.len() - per_order.len();
    assert_share(
        "empty orders",
        empty as f64 / orders.len() as f64,
        0.2,
        0.02,
    );
    Ok(())
}

#[test]
fn lookup_splits_orders_with_their_items() -> Result<()> {
    let t = tempfile::tempdir()?;
    let n = 2000;
    let s = gen_lookup(t.path(), n, Format::Csv, 4, 5)?;
    let (_, orders) = read_parts(t.path(), "olist_orders_dataset", 4)?;
    let (_, items) = read_parts(t.path(), "olist_order_items_dataset", 4)?;
    assert_eq!(dir_bytes(t.path())?.len(), 8);
    assert_eq!(items.len() as u64, n);
    assert_eq!(s.rows("olist_orders_dataset"), Some(orders.len() as u64));
    let part: HashMap<&str, usize> = orders.iter().map(|(p, o)| (o[0].as_str(), *p)).collect();
    let mut per_part = [0u64; 4];
    for (p, it) in &items {
        assert_eq!(
            part.get(it[0].as_str()),
            Some(p),
            "item in another part than its order"
        );
        per_part[*p] += 1;
    }
    for c in per_part {
        assert!(c.abs_diff(n / 4) <= 4, "{per_part:?}");
    }
    Ok(())
}

#[test]
fn lookup_parquet_reads_back_like_the_csv() -> Result<()> {
    let t = tempfile::tempdir()?;
    let (csv_dir, pq_dir) = (t.path().join("csv"), t.path().join("pq"));
    gen_lookup(&csv_dir, 3000, Format::Csv, 2, 11)?;
    gen_lookup(&pq_dir, 3000, Format::Parquet, 2, 11)?;
    for (stem, pads) in [
        ("olist_orders_dataset", vec![0; 8]),
        ("olist_order_items_dataset", vec![0, 5, 0, 0, 0, 0, 0]),
    ] {
        let (header, csv_rows) = read_parts(&csv_dir, stem, 2)?;
        let mut pq_rows = Vec::new();
        for i in 0..2 {
            for row in read_parquet(&pq_dir.join(format!("{stem}_{i:05}.parquet")))? {
                let names: Vec<&str> = row.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(names.join(","), header);
                let cells = row
                    .iter()
                    .zip(&pads)
                    .map(|((_, f), &pad)| field_text(f, pad))
                    .collect::<Result<Vec<_>>>()?;
                pq_rows.push((i, cells));
            }
        }
        assert_eq!(pq_rows.len(), csv_rows.len(), "{stem}");
        assert_eq!(
            pq_rows, csv_rows,
            "{stem}: same seed, same values in both formats"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// portfolio
// ---------------------------------------------------------------------------------------------

#[test]
fn portfolio_same_seed_same_bytes_other_seed_differs() -> Result<()> {
    let t = tempfile::tempdir()?;
    let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    gen_portfolio(&a, 2, Format::Csv, (2, 1), 7)?;
    gen_portfolio(&b, 2, Format::Csv, (2, 1), 7)?;
    gen_portfolio(&c, 2, Format::Csv, (2, 1), 8)?;
    let (da, db, dc) = (dir_bytes(&a)?, dir_bytes(&b)?, dir_bytes(&c)?);
    assert_eq!(da.len(), 4);
    assert_eq!(da, db);
    for name in ["holdings.csv", "txns_00000.csv", "txns_00001.csv"] {
        assert_ne!(da.get(name), dc.get(name), "{name}");
    }
    Ok(())
}

#[test]
fn portfolio_schema_shape_and_consistency() -> Result<()> {
    let t = tempfile::tempdir()?;
    let n = 4;
    let s = gen_portfolio(t.path(), n, Format::Csv, (3, 2), 11)?;
    let (ah, accounts) = read_csv(&t.path().join("accounts.csv"))?;
    let (th, txns) = read_parts(t.path(), "txns", 3)?;
    let (hh, holdings) = read_parts(t.path(), "holdings", 2)?;
    assert_eq!(ah, "account_id,earliest_period_start");
    assert_eq!(th, "ts,account_id,ticker,qty,price");
    assert_eq!(hh, "d,account_id,ticker,qty");
    let ids: Vec<&str> = accounts.iter().map(|a| a[0].as_str()).collect();
    assert_eq!(
        ids,
        ["ARKK-000001", "ARKW-000002", "ARKG-000003", "ARKQ-000004"]
    );
    assert!(accounts.iter().all(|a| a[1] == "2020-09-30"));
    assert_eq!(s.rows("txns"), Some(txns.len() as u64));
    assert_eq!(s.rows("holdings"), Some(holdings.len() as u64));

    let quarters = [
        "2020-09-30",
        "2020-12-31",
        "2021-03-31",
        "2021-06-30",
        "2021-09-30",
        "2021-12-31",
        "2022-03-31",
        "2022-06-30",
        "2022-09-30",
        "2022-12-31",
    ];
    let q_days = quarters
        .iter()
        .map(|q| date(q))
        .collect::<Result<Vec<_>>>()?;
    // (account, ticker) → holdings by quarter.
    let mut held: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    let mut account_part: HashMap<String, usize> = HashMap::new();
    for (part, h) in &holdings {
        assert_eq!(
            *account_part.entry(format!("h{}", h[1])).or_insert(*part),
            *part
        );
        let q = quarters
            .iter()
            .position(|q| *q == h[0])
            .context("not a quarter end")?;
        let v = held.entry((h[1].clone(), h[2].clone())).or_default();
        assert_eq!(v.len(), q, "holdings by date then ticker");
        let qty: i64 = h[3].parse()?;
        assert!(qty >= 0);
        v.push(qty);
    }
    let mut tickers_per_account: BTreeMap<&str, usize> = BTreeMap::new();
    for ((a, tk), v) in &held {
        assert_eq!(v.len(), 10);
        assert!(tk.len() >= 2 && tk.len() <= 5 && tk.bytes().all(|b| b.is_ascii_uppercase()));
        *tickers_per_account.entry(a.as_str()).or_default() += 1;
    }
    assert_eq!(tickers_per_account.len(), n as usize);
    assert!(
        tickers_per_account.values().all(|c| (55..=86).contains(c)),
        "{tickers_per_account:?}"
    );

    let (first, last, ye2020) = (
        date("2020-10-16")?,
        date("2022-12-31")?,
        date("2020-12-31")?,
    );
    let mut seen = BTreeSet::new();
    let mut per_account: BTreeMap<&str, u64> = BTreeMap::new();
    let mut running: HashMap<(String, String), i64> = HashMap::new();
    let mut q_idx: HashMap<(String, String), usize> = HashMap::new();
    let (mut sells, mut early) = (0u64, 0u64);
    let mut sizes = Vec::new();
    let mut prices = Vec::new();
    let mut prev: Option<(i64, String, String)> = None;
    for (part, tx) in &txns {
        assert_eq!(
            *account_part.entry(format!("t{}", tx[1])).or_insert(*part),
            *part
        );
        let d = date(&tx[0])?;
        assert!((first..=last).contains(&d));
        assert!((d + 3).rem_euclid(7) < 5, "{} is a weekend", tx[0]);
        if d < ye2020 {
            early += 1;
        }
        assert!(
            seen.insert((tx[1].clone(), tx[2].clone(), d)),
            "two txns on one day: {tx:?}"
        );
        let key = (d, tx[1].clone(), tx[2].clone());
        if let Some(p) = &prev
            && p.1 == key.1
        {
            assert!((p.0, &p.2) < (key.0, &key.2), "txns by day then ticker");
        }
        prev = Some(key);
        *per_account.entry(tx[1].as_str()).or_default() += 1;
        let qty: i64 = tx[3].parse()?;
        assert_ne!(qty, 0);
        if qty < 0 {
            sells += 1;
        }
        sizes.push(qty.abs());
        let price = cents(&tx[4])?;
        assert!(
            tx[4].split_once('.').is_some_and(|(_, f)| f.len() == 2),
            "2 decimals: {}",
            tx[4]
        );
        assert!((1..=370_000).contains(&price));
        prices.push(price);

        // Replay against the holdings: never below zero, equal at every quarter end.
        let k = (tx[1].clone(), tx[2].clone());
        let h = held
            .get(&k)
            .context("txn for a ticker the account does not hold")?;
        let qi = q_idx.entry(k.clone()).or_insert(0);
        let r = running.entry(k).or_insert(h[0]);
        while *qi + 1 < 10 && q_days[*qi + 1] < d {
            *qi += 1;
            assert_eq!(*r, h[*qi], "holding at {} of {tx:?}", quarters[*qi]);
        }
        *r += qty;
        assert!(*r >= 0, "sold more than held: {tx:?}");
    }
    for (k, h) in &held {
        let r = running.get(k).copied().unwrap_or(h[0]);
        let qi = q_idx.get(k).copied().unwrap_or(0);
        for q in qi + 1..10 {
            assert_eq!(r, h[q], "holding of {k:?} at {}", quarters[q]);
        }
    }
    assert!(
        per_account.values().all(|c| (3_600..=23_100).contains(c)),
        "{per_account:?}"
    );
    let total = txns.len() as f64;
    assert_share("sells", sells as f64 / total, 0.56, 0.015);
    assert_share("before 2020-12-31", early as f64 / total, 0.094, 0.02);
    sizes.sort_unstable();
    prices.sort_unstable();
    let median = sizes[sizes.len() / 2];
    let p99 = sizes[sizes.len() * 99 / 100];
    assert!((7_000..=11_000).contains(&median), "median |qty| {median}");
    assert!((300_000..=1_000_000).contains(&p99), "p99 |qty| {p99}");
    let pmed = prices[prices.len() / 2];
    assert!((2_000..=15_000).contains(&pmed), "median price {pmed}");
    Ok(())
}

#[test]
fn portfolio_parquet_reads_back_with_the_csv_row_counts() -> Result<()> {
    let t = tempfile::tempdir()?;
    let (csv_dir, pq_dir) = (t.path().join("csv"), t.path().join("pq"));
    let a = gen_portfolio(&csv_dir, 1, Format::Csv, (1, 1), 4)?;
    let b = gen_portfolio(&pq_dir, 1, Format::Parquet, (1, 1), 4)?;
    assert_eq!(a, b);
    for (stem, header) in [
        ("accounts", "account_id,earliest_period_start"),
        ("txns", "ts,account_id,ticker,qty,price"),
        ("holdings", "d,account_id,ticker,qty"),
    ] {
        let rows = read_parquet(&pq_dir.join(format!("{stem}.parquet")))?;
        let (h, csv_rows) = read_csv(&csv_dir.join(format!("{stem}.csv")))?;
        assert_eq!(h, header);
        assert_eq!(rows.len(), csv_rows.len(), "{stem}");
        let names: Vec<&str> = rows[0].iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.join(","), header);
        // Spot-check the values of the first rows (prices: cents in both).
        for (pr, cr) in rows.iter().zip(&csv_rows).take(50) {
            for ((_, f), c) in pr.iter().zip(cr) {
                let text = field_text(f, 0)?;
                if c.contains('.') {
                    assert_eq!(cents(&text)?, cents(c)?);
                } else {
                    assert_eq!(&text, c);
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// portfolio-clone
// ---------------------------------------------------------------------------------------------

fn clone_params(from: &Path, out: &Path, clones: u64, files: (u16, u16)) -> CloneParams {
    CloneParams {
        from: from.to_path_buf(),
        clones,
        out: out.to_path_buf(),
        txn_files: files.0,
        holding_files: files.1,
    }
}

#[test]
fn clone_hand_written_sample_exactly() -> Result<()> {
    let t = tempfile::tempdir()?;
    let src = t.path().join("src");
    std::fs::create_dir(&src)?;
    std::fs::write(
        src.join("accounts.csv"),
        "account_id,earliest_period_start\nARKK-000007,2020-09-30\nMY-FUND-12,2021-01-01\n",
    )?;
    std::fs::write(
        src.join("txns.csv"),
        "ts,account_id,ticker,qty,price\n\
         2021-01-04,MY-FUND-12,TSLA,-10,729.7\n\
         2021-01-04,ARKK-000007,\"A,B\",5,1.00\n\
         2021-01-05,MY-FUND-12,ROKU,3,400.5\n",
    )?;
    std::fs::write(
        src.join("holdings.csv"),
        "d,account_id,ticker,qty\r\n2020-09-30,ARKK-000007,\"A,B\",100\r\n2020-09-30,MY-FUND-12,TSLA,50\r\n",
    )?;
    let out = t.path().join("out");
    let s = portfolio_clone(&clone_params(&src, &out, 3, (2, 1)))?;
    assert_eq!(s.rows("accounts"), Some(6));
    assert_eq!(s.rows("txns"), Some(9));
    assert_eq!(s.rows("holdings"), Some(6));
    let read = |n: &str| std::fs::read_to_string(out.join(n));
    // Global index i = clone · 2 + k (k = 1 for ARKK, 2 for MY-FUND); 6 accounts in 2 txn
    // parts: i = 1..=3 in part 0, 4..=6 in part 1.
    assert_eq!(
        read("accounts.csv")?,
        "account_id,earliest_period_start\n\
         ARKK-000001,2020-09-30\nARKK-000003,2020-09-30\nARKK-000005,2020-09-30\n\
         MY-FUND-000002,2021-01-01\nMY-FUND-000004,2021-01-01\nMY-FUND-000006,2021-01-01\n"
    );
    assert_eq!(
        read("txns_00000.csv")?,
        "ts,account_id,ticker,qty,price\n\
         2021-01-04,MY-FUND-000002,TSLA,-10,729.7\n\
         2021-01-04,ARKK-000001,\"A,B\",5,1.00\n\
         2021-01-04,ARKK-000003,\"A,B\",5,1.00\n\
         2021-01-05,MY-FUND-000002,ROKU,3,400.5\n"
    );
    assert_eq!(
        read("txns_00001.csv")?,
        "ts,account_id,ticker,qty,price\n\
         2021-01-04,MY-FUND-000004,TSLA,-10,729.7\n\
         2021-01-04,MY-FUND-000006,TSLA,-10,729.7\n\
         2021-01-04,ARKK-000005,\"A,B\",5,1.00\n\
         2021-01-05,MY-FUND-000004,ROKU,3,400.5\n\
         2021-01-05,MY-FUND-000006,ROKU,3,400.5\n"
    );
    assert_eq!(
        read("holdings.csv")?,
        "d,account_id,ticker,qty\n\
         2020-09-30,ARKK-000001,\"A,B\",100\n2020-09-30,ARKK-000003,\"A,B\",100\n\
         2020-09-30,ARKK-000005,\"A,B\",100\n2020-09-30,MY-FUND-000002,TSLA,50\n\
         2020-09-30,MY-FUND-000004,TSLA,50\n2020-09-30,MY-FUND-000006,TSLA,50\n"
    );
    assert_eq!(dir_bytes(&out)?.len(), 4);
    Ok(())
}

#[test]
fn one_clone_of_generated_data_is_the_same_data() -> Result<()> {
    let t = tempfile::tempdir()?;
    let (src, out) = (t.path().join("src"), t.path().join("out"));
    gen_portfolio(&src, 3, Format::Csv, (2, 3), 21)?;
    portfolio_clone(&clone_params(&src, &out, 1, (2, 3)))?;
    assert_eq!(dir_bytes(&src)?, dir_bytes(&out)?);
    // Split inputs are read too: a re-split clone of the split output has the same rows.
    let again = t.path().join("again");
    portfolio_clone(&clone_params(&out, &again, 2, (1, 1)))?;
    let (_, txns) = read_csv(&again.join("txns.csv"))?;
    let (_, src_txns) = read_parts(&src, "txns", 2)?;
    assert_eq!(txns.len(), 2 * src_txns.len());
    Ok(())
}

#[test]
fn clone_rejects_bad_input() -> Result<()> {
    let t = tempfile::tempdir()?;
    let src = t.path().join("src");
    std::fs::create_dir(&src)?;
    let out = t.path().join("out");
    std::fs::write(
        src.join("accounts.csv"),
        "account_id,earliest_period_start\nARKK,2020-09-30\n",
    )?;
    let err = portfolio_clone(&clone_params(&src, &out, 2, (1, 1))).unwrap_err();
    assert!(
        matches!(err, GenError::BadAccountId { record: 1, .. }),
        "{err}"
    );

    std::fs::write(
        src.join("accounts.csv"),
        "account_id,earliest_period_start\nARKK-1,2020-09-30\n",
    )?;
    std::fs::write(
        src.join("holdings.csv"),
        "d,account_id,ticker,qty\n2020-09-30,ARKK-2,X,1\n",
    )?;
    std::fs::write(src.join("txns.csv"), "ts,account_id,ticker,qty,price\n")?;
    let err = portfolio_clone(&clone_params(&src, &out, 2, (1, 1))).unwrap_err();
    assert!(
        matches!(err, GenError::UnknownAccount { record: 1, .. }),
        "{err}"
    );

    std::fs::write(src.join("holdings.csv"), "d,acct,ticker,qty\n")?;
    let err = portfolio_clone(&clone_params(&src, &out, 2, (1, 1))).unwrap_err();
    assert!(matches!(err, GenError::MissingColumn { .. }), "{err}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------------------------

#[test]
fn cli_generates_and_validates_arguments() -> Result<()> {
    let t = tempfile::tempdir()?;
    let bin = env!("CARGO_BIN_EXE_plexus-bench");
    let out = t.path().join("l");
    let st = Command::new(bin)
        .args([
            "gen", "lookup", "--items", "50", "--files", "2", "--seed", "3", "--out",
        ])
        .arg(&out)
        .status()?;
    assert!(st.success());
    let names: Vec<String> = dir_bytes(&out)?.into_keys().collect();
    assert_eq!(
        names,
        [
            "olist_order_items_dataset_00000.csv",
            "olist_order_items_dataset_00001.csv",
            "olist_orders_dataset_00000.csv",
            "olist_orders_dataset_00001.csv",
        ]
    );
    let lib = t.path().join("lib");
    gen_lookup(&lib, 50, Format::Csv, 2, 3)?;
    assert_eq!(dir_bytes(&out)?, dir_bytes(&lib)?);

    let out = t.path().join("p");
    let st = Command::new(bin)
        .args([
            "gen",
            "portfolio",
            "--accounts",
            "1",
            "--format",
            "parquet",
            "--txn-files",
            "2",
        ])
        .arg("--out")
        .arg(&out)
        .status()?;
    assert!(st.success());
    assert!(out.join("txns_00001.parquet").is_file() && out.join("holdings.parquet").is_file());

    let st = Command::new(bin)
        .args(["gen", "lookup", "--items", "5", "--files", "0", "--out"])
        .arg(t.path().join("bad"))
        .output()?;
    assert!(!st.status.success());
    Ok(())
}
