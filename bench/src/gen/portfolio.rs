//! `gen portfolio`: accounts, txns and holdings shaped like the ARK-fund data set of
//! Capillaries' portfolio test.
//!
//! Shape (per account, drawn from the account's own random stream so accounts are
//! independent): 55–86 of 250 tickers; a txn count from a triangular distribution on
//! [3,600, 23,100] with mode 17,400 (mean 14,700) spread over the tickers; for each ticker its
//! txn days are a uniform sample without replacement of the trading days (weekdays
//! 2020-10-16 … 2022-12-30), so there is at most one txn per (account, ticker, day); signed
//! quantities with 56 % sells and a log-normal size (median 8,900, p99 ≈ 600,000); the price is
//! the ticker's end-of-day price, shared by all accounts (log-normal base plus a random walk,
//! within 0.05–3,700; the median over txns lands near 55, depending on the seed). Holdings at
//! the 10 quarter ends 2020-09-30 … 2022-12-31 start from an initial holding large enough that
//! no sell ever exceeds what is held (the deepest dip of the running balance plus a
//! log-normal cushion), so holdings are always positive and consistent with the txns.

use std::collections::BTreeSet;
use std::path::PathBuf;

use parquet::data_type::ByteArray;

use super::rng::{Rng, exp};
use super::sink::{Col, Kind, SplitTable, TableFile, col, part_name};
use super::{Format, GenError, Summary, TableCount, civil, create_dir};

/// Options of `gen portfolio`.
#[derive(Clone, Debug, clap::Args)]
pub struct PortfolioParams {
    /// Number of accounts (996 is the Capillaries bigtest scale: ~14.7 M txns).
    #[arg(long)]
    pub accounts: u64,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Split txns into this many files (by account ranges).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub txn_files: u16,
    /// Split holdings into this many files (by account ranges).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub holding_files: u16,
    /// Random seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// File name stem of the accounts table.
pub(crate) const ACCOUNTS: &str = "accounts";
/// File name stem of the txns table.
pub(crate) const TXNS: &str = "txns";
/// File name stem of the holdings table.
pub(crate) const HOLDINGS: &str = "holdings";

static ACCOUNT_COLS: [Col; 2] = [
    col("account_id", Kind::Str),
    col("earliest_period_start", Kind::Str),
];

static TXN_COLS: [Col; 5] = [
    col("ts", Kind::Str),
    col("account_id", Kind::Str),
    col("ticker", Kind::Str),
    col("qty", Kind::Int { pad: 0 }),
    col("price", Kind::Cents { fixed: true }),
];

static HOLDING_COLS: [Col; 4] = [
    col("d", Kind::Str),
    col("account_id", Kind::Str),
    col("ticker", Kind::Str),
    col("qty", Kind::Int { pad: 0 }),
];

/// Fund names cycled over the account indexes (`ARKK-000001`, `ARKW-000002`, …).
const FUNDS: [&str; 6] = ["ARKK", "ARKW", "ARKG", "ARKQ", "ARKF", "ARKX"];
const TICKERS: usize = 250;
const MIN_TICKERS: i64 = 55;
const MAX_TICKERS: i64 = 86;
/// Txns per account: triangular(min, mode, max); mean (min + mode + max) / 3 = 14,700.
const TXNS_MIN: f64 = 3_600.0;
const TXNS_MODE: f64 = 17_400.0;
const TXNS_MAX: f64 = 23_100.0;
const SELL_SHARE: f64 = 0.56;
/// |qty| is log-normal: median 8,900, and σ such that p99 = e^(ln 8900 + 2.326σ) ≈ 600,000.
const LN_QTY_MEDIAN: f64 = 9.093_806_555_720_231;
const QTY_SIGMA: f64 = 1.81;
/// Ticker base prices are log-normal with median 50 (ln 50) and σ 1.45, which puts the median
/// txn price near 55 and the top tickers near the 3,700 cap; daily log-returns have σ 0.02.
const LN_PRICE_MEDIAN: f64 = 3.912_023_005_428_146;
const PRICE_SIGMA: f64 = 1.45;
const DAILY_SIGMA: f64 = 0.02;
/// ln 0.05 and ln 3700: the price range.
const LN_PRICE_MIN: f64 = -2.995_732_273_553_991;
const LN_PRICE_MAX: f64 = 8.216_088_098_632_316;

/// Trading days, quarter ends and tickers: everything shared by all accounts.
struct Market {
    /// Trading days (days since 1970-01-01), ascending.
    days: Vec<i64>,
    /// Their `YYYY-MM-DD` text.
    day_text: Vec<ByteArray>,
    /// Quarter ends 2020-09-30 … 2022-12-31 (days since 1970-01-01).
    quarter_ends: Vec<i64>,
    quarter_text: Vec<ByteArray>,
    /// Ticker symbols, sorted (so index order is name order).
    tickers: Vec<ByteArray>,
    /// End-of-day price in cents, `[ticker * days.len() + day]`.
    prices: Vec<i64>,
}

fn text(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

impl Market {
    fn new(seed: u64) -> Self {
        let first = civil::days_from_civil(2020, 10, 16);
        let last = civil::days_from_civil(2022, 12, 31);
        let days: Vec<i64> = (first..=last)
            .filter(|&d| civil::iso_weekday(d) <= 5)
            .collect();
        let day_text = days.iter().map(|&d| text(&civil::date_string(d))).collect();
        let mut quarter_ends = vec![civil::days_from_civil(2020, 9, 30)];
        for y in 2020..=2022 {
            for (m, d) in [(3, 31), (6, 30), (9, 30), (12, 31)] {
                let q = civil::days_from_civil(y, m, d);
                if q > quarter_ends[0] {
                    quarter_ends.push(q);
                }
            }
        }
        let quarter_text = quarter_ends
            .iter()
            .map(|&d| text(&civil::date_string(d)))
            .collect();

        let mut rng = Rng::new(seed, 0);
        let mut names = BTreeSet::new();
        while names.len() < TICKERS {
            // Mostly 4 letters, like most of the ARK holdings.
            let len = match rng.below(100) {
                0..=79 => 4,
                80..=91 => 3,
                92..=96 => 5,
                _ => 2,
            };
            let name: String = (0..len)
                .map(|_| char::from(b'A' + rng.below(26) as u8))
                .collect();
            names.insert(name);
        }
        let tickers: Vec<ByteArray> = names.iter().map(|n| text(n)).collect();
        let mut prices = Vec::with_capacity(TICKERS * days.len());
        for _ in 0..TICKERS {
            let mut lp =
                (LN_PRICE_MEDIAN + PRICE_SIGMA * rng.normal()).clamp(LN_PRICE_MIN, LN_PRICE_MAX);
            for _ in 0..days.len() {
                lp = (lp + DAILY_SIGMA * rng.normal()).clamp(LN_PRICE_MIN, LN_PRICE_MAX);
                prices.push(((exp(lp) * 100.0).round() as i64).clamp(5, 370_000));
            }
        }
        Self {
            days,
            day_text,
            quarter_ends,
            quarter_text,
            tickers,
            prices,
        }
    }
}

/// The id of account `index` (1-based): `<FUND>-%06d`.
pub(crate) fn account_id(fund: &str, index: u64) -> String {
    format!("{fund}-{index:06}")
}

/// One account's generated data, held only while it is written.
struct Account {
    /// Global ticker indexes, ascending.
    tickers: Vec<usize>,
    /// `(day index, position in tickers, qty)`, sorted by day then ticker.
    txns: Vec<(u32, u32, i64)>,
    /// Holdings `[quarter][position in tickers]`.
    holdings: Vec<Vec<i64>>,
}

/// |qty| of a txn or of an initial cushion.
fn qty_size(rng: &mut Rng) -> i64 {
    (rng.lognormal(LN_QTY_MEDIAN, QTY_SIGMA).round() as i64).max(1)
}

/// Spreads `total` over weights: floor shares, the remainder one by one in order, and
/// everything above `cap` moved to the entries still below it. Needs `total <= cap · len`.
fn allocate(total: u64, weights: &[f64], cap: u64) -> Vec<u64> {
    let sum: f64 = weights.iter().sum();
    let mut c: Vec<u64> = weights
        .iter()
        .map(|w| ((total as f64 * w / sum).floor() as u64).min(cap))
        .collect();
    let mut left = total.saturating_sub(c.iter().sum());
    while left > 0 {
        let mut moved = false;
        for x in c.iter_mut() {
            if left == 0 {
                break;
            }
            if *x < cap {
                *x += 1;
                left -= 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    c
}

fn account(rng: &mut Rng, m: &Market) -> Account {
    let n_days = m.days.len();
    // A partial Fisher–Yates shuffle picks the account's tickers.
    let n_tickers = rng.range(MIN_TICKERS, MAX_TICKERS) as usize;
    let mut pool: Vec<usize> = (0..TICKERS).collect();
    for i in 0..n_tickers {
        let j = i + rng.below((TICKERS - i) as u64) as usize;
        pool.swap(i, j);
    }
    let mut tickers = pool[..n_tickers].to_vec();
    tickers.sort_unstable();

    let total = rng.triangular(TXNS_MIN, TXNS_MODE, TXNS_MAX).round() as u64;
    let weights: Vec<f64> = (0..n_tickers).map(|_| 0.25 + 1.5 * rng.unit()).collect();
    let counts = allocate(total, &weights, n_days as u64);

    let mut txns = Vec::with_capacity(total as usize);
    for (pos, &count) in counts.iter().enumerate() {
        // Selection sampling (Knuth's algorithm S): `count` distinct days, in day order.
        let mut need = count;
        for d in 0..n_days {
            if need == 0 {
                break;
            }
            if rng.below((n_days - d) as u64) < need {
                need -= 1;
                let size = qty_size(rng);
                let qty = if rng.chance(SELL_SHARE) { -size } else { size };
                txns.push((d as u32, pos as u32, qty));
            }
        }
    }
    txns.sort_unstable_by_key(|&(d, pos, _)| (d, pos));

    // The initial holding covers the deepest dip of the running balance, plus a cushion.
    let mut running = vec![0i64; n_tickers];
    let mut low = vec![0i64; n_tickers];
    for &(_, pos, qty) in &txns {
        let p = pos as usize;
        running[p] += qty;
        low[p] = low[p].min(running[p]);
    }
    let start: Vec<i64> = low.iter().map(|&l| -l + qty_size(rng)).collect();

    let mut holdings = vec![start.clone()];
    let mut running = start;
    let mut q = 1;
    for &(d, pos, qty) in &txns {
        let day = m.days[d as usize];
        while q < m.quarter_ends.len() && m.quarter_ends[q] < day {
            holdings.push(running.clone());
            q += 1;
        }
        running[pos as usize] += qty;
    }
    while holdings.len() < m.quarter_ends.len() {
        holdings.push(running.clone());
    }
    Account {
        tickers,
        txns,
        holdings,
    }
}

/// Writes `accounts.*`, `txns*` and `holdings*` into `p.out`.
///
/// Account `j` (1-based) has id `FUNDS[(j-1) % 6]-%06d(j)` and `earliest_period_start`
/// 2020-09-30 (the first holdings date); with `--txn-files K` its txns go to part
/// `⌊(j-1)·K/N⌋` (likewise holdings), so each account is in exactly one part. Within an
/// account, holdings are ordered by date then ticker, txns by day then ticker.
pub fn portfolio(p: &PortfolioParams) -> Result<Summary, GenError> {
    create_dir(&p.out)?;
    let market = Market::new(p.seed);
    let tk = usize::from(p.txn_files);
    let hk = usize::from(p.holding_files);
    let accounts_path = p.out.join(part_name(ACCOUNTS, p.format, 1, 0));
    let mut accounts = TableFile::create(accounts_path, p.format, &ACCOUNT_COLS)?;
    let mut txns = SplitTable::new(&p.out, TXNS, p.format, &TXN_COLS, tk);
    let mut holdings = SplitTable::new(&p.out, HOLDINGS, p.format, &HOLDING_COLS, hk);
    let start = &market.quarter_text[0];
    let n_days = market.days.len();
    for j in 1..=p.accounts {
        let fund = FUNDS[((j - 1) % FUNDS.len() as u64) as usize];
        let id = text(&account_id(fund, j));
        accounts.shared(&id);
        accounts.shared(start);
        accounts.end_row()?;

        let mut rng = Rng::new(p.seed, j);
        let a = account(&mut rng, &market);

        let w = holdings.part(holdings.part_of(j - 1, p.accounts))?;
        for (q, row) in a.holdings.iter().enumerate() {
            for (pos, &qty) in row.iter().enumerate() {
                w.shared(&market.quarter_text[q]);
                w.shared(&id);
                w.shared(&market.tickers[a.tickers[pos]]);
                w.int(qty);
                w.end_row()?;
            }
        }

        let w = txns.part(txns.part_of(j - 1, p.accounts))?;
        for &(d, pos, qty) in &a.txns {
            let t = a.tickers[pos as usize];
            w.shared(&market.day_text[d as usize]);
            w.shared(&id);
            w.shared(&market.tickers[t]);
            w.int(qty);
            w.cents(market.prices[t * n_days + d as usize]);
            w.end_row()?;
        }
    }
    let account_rows = accounts.finish()?;
    let holding_rows = holdings.finish()?;
    let txn_rows = txns.finish()?;
    Ok(Summary {
        tables: vec![
            TableCount {
                table: ACCOUNTS,
                files: 1,
                rows: account_rows,
            },
            TableCount {
                table: HOLDINGS,
                files: hk,
                rows: holding_rows,
            },
            TableCount {
                table: TXNS,
                files: tk,
                rows: txn_rows,
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn market_calendar() {
        let m = Market::new(1);
        assert_eq!(m.quarter_ends.len(), 10);
        let q: Vec<String> = m
            .quarter_text
            .iter()
            .map(|b| String::from_utf8(b.data().to_vec()).unwrap())
            .collect();
        assert_eq!(q[0], "2020-09-30");
        assert_eq!(q[1], "2020-12-31");
        assert_eq!(q[9], "2022-12-31");
        let before = m
            .days
            .iter()
            .filter(|&&d| d < civil::days_from_civil(2020, 12, 31))
            .count();
        let share = before as f64 / m.days.len() as f64;
        assert!((0.08..0.12).contains(&share), "{share}");
        assert_eq!(m.tickers.len(), TICKERS);
        let four = m.tickers.iter().filter(|t| t.len() == 4).count();
        assert!(four > TICKERS * 7 / 10);
        assert!(m.prices.iter().all(|&c| (5..=370_000).contains(&c)));
        let mut sorted = m.prices.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        assert!((3_000..10_000).contains(&median), "median price {median}");
    }

    #[test]
    fn allocate_respects_total_and_cap() {
        let c = allocate(1000, &[1.0, 1.0, 8.0], 400);
        assert_eq!(c.iter().sum::<u64>(), 1000);
        assert!(c.iter().all(|&x| x <= 400));
    }

    #[test]
    fn account_invariants() {
        let m = Market::new(9);
        for j in 1..=3 {
            let a = account(&mut Rng::new(9, j), &m);
            let n = a.txns.len() as f64;
            assert!((TXNS_MIN..=TXNS_MAX).contains(&n));
            assert_eq!(a.holdings.len(), 10);
            assert!(a.holdings.iter().flatten().all(|&h| h > 0));
            let sells = a.txns.iter().filter(|t| t.2 < 0).count() as f64;
            assert!((sells / n - SELL_SHARE).abs() < 0.03);
        }
    }
}
