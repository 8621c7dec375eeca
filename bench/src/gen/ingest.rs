//! `gen ingest`: one large CSV file of order items for the ingest benchmark (issue #12): a
//! single file, so that only splitting it can use more than one core.
//!
//! Columns: `item_id` (sequential), `order_id` (32 hex digits), `seller_id` (one of 3,000,
//! the non-unique index key), `shipping_limit_date` (`2006-01-02 15:04:05`), `price` and
//! `freight_value` (cents as `12.34`), `note` (a quoted field with a separator and, in one row
//! of 50, a newline: the splitter must cut at record boundaries, not at lines). About 110
//! bytes a row.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use super::civil::{DayCache, push_datetime_cached};
use super::rng::Rng;
use super::{GenError, Summary, TableCount, create_dir};

/// File name stem of the ingest table.
pub(crate) const INGEST_ITEMS: &str = "ingest_items";

/// Sellers the index key is drawn from.
const SELLERS: u64 = 3000;

/// Options of `gen ingest`.
#[derive(Clone, Debug, clap::Args)]
pub struct IngestParams {
    /// Number of rows.
    #[arg(long)]
    pub rows: u64,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Random seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Writes `ingest_items.csv` with `p.rows` rows.
pub fn ingest(p: &IngestParams) -> Result<Summary, GenError> {
    create_dir(&p.out)?;
    let path = p.out.join(format!("{INGEST_ITEMS}.csv"));
    let write_err = |source| GenError::Write {
        path: path.clone(),
        source,
    };
    let file = File::create(&path).map_err(|source| GenError::Create {
        path: path.clone(),
        source,
    })?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    w.write_all(b"item_id,order_id,seller_id,shipping_limit_date,price,freight_value,note\n")
        .map_err(write_err)?;
    let mut rng = Rng::new(p.seed, 7);
    let mut line = Vec::with_capacity(256);
    let mut days = DayCache::default();
    for i in 0..p.rows {
        line.clear();
        let order = rng.hex_id();
        let seller = rng.below(SELLERS);
        // 2017-01-01 00:00:00 .. 2018-12-31 23:59:59.
        let secs = 1_483_228_800 + rng.below(730 * 86_400) as i64;
        let price = rng.range(100, 99_999);
        let freight = rng.range(0, 9_999);
        let _ = write!(line, "{i},");
        line.extend_from_slice(&order);
        let _ = write!(line, ",s{seller:04},");
        push_datetime_cached(&mut line, secs, &mut days);
        let _ = write!(
            line,
            ",{}.{:02},{}.{:02},",
            price / 100,
            price % 100,
            freight / 100,
            freight % 100
        );
        if i % 50 == 0 {
            let _ = write!(line, "\"boxed, fragile\nsee {i}\"");
        } else {
            let _ = write!(line, "\"boxed, {}\"", i % 7);
        }
        line.push(b'\n');
        w.write_all(&line).map_err(write_err)?;
    }
    w.flush().map_err(write_err)?;
    Ok(Summary {
        tables: vec![TableCount {
            table: INGEST_ITEMS,
            files: 1,
            rows: p.rows,
        }],
    })
}
