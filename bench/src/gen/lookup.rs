//! `gen lookup`: Olist orders and order items shaped like Capillaries' lookup bigtest data.
//!
//! Columns, column order and text formats are those of the conformance inputs
//! (`conformance/lookup/in`): 32-hex-digit ids, `%05d` item ids, timestamps
//! `2006-01-02 15:04:05` with `0001-01-01 00:00:00` for events that did not happen, and prices
//! in cents printed with trailing zeros dropped (`28.5`, `110`), as in those files.

use std::path::PathBuf;

use parquet::data_type::ByteArray;

use super::rng::Rng;
use super::sink::{Col, Kind, SplitTable, col};
use super::{Format, GenError, Summary, TableCount, create_dir};

/// Options of `gen lookup`.
#[derive(Clone, Debug, clap::Args)]
pub struct LookupParams {
    /// Total number of order items (100,000 is the Capillaries bigtest size).
    #[arg(long)]
    pub items: u64,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Split orders and items into this many files each (`…_00000.csv` …); 1 keeps the
    /// conformance file names.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub files: u16,
    /// Random seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// File name stem of the orders table.
pub(crate) const ORDERS: &str = "olist_orders_dataset";
/// File name stem of the order items table.
pub(crate) const ITEMS: &str = "olist_order_items_dataset";

static ORDER_COLS: [Col; 8] = [
    col("order_id", Kind::Str),
    col("customer_id", Kind::Str),
    col("order_status", Kind::Str),
    col("order_purchase_timestamp", Kind::DateTime),
    col("order_approved_at", Kind::DateTime),
    col("order_delivered_carrier_date", Kind::DateTime),
    col("order_delivered_customer_date", Kind::DateTime),
    col("order_estimated_delivery_date", Kind::DateTime),
];

static ITEM_COLS: [Col; 7] = [
    col("order_id", Kind::Str),
    col("order_item_id", Kind::Int { pad: 5 }),
    col("product_id", Kind::Str),
    col("seller_id", Kind::Str),
    col("shipping_limit_date", Kind::DateTime),
    col("price", Kind::Cents { fixed: false }),
    col("freight_value", Kind::Cents { fixed: false }),
];

const SELLERS: usize = 200;
const MAX_PRODUCTS_PER_SELLER: i64 = 100;
/// Items per order are uniform in `0..=MAX_ITEMS_PER_ORDER`, so 1/5 of the orders are empty.
const MAX_ITEMS_PER_ORDER: u64 = 4;
/// 2016-01-01 00:00:00 UTC.
const EPOCH_2016: i64 = 1_451_606_400;

struct Product {
    id: ByteArray,
    seller: usize,
    price: i64,
    freight: i64,
}

/// The seller/product catalog: ~10,000 products, independent of the scale.
fn catalog(rng: &mut Rng) -> (Vec<ByteArray>, Vec<Product>) {
    let sellers: Vec<ByteArray> = (0..SELLERS)
        .map(|_| ByteArray::from(rng.hex_id().to_vec()))
        .collect();
    let mut products = Vec::new();
    for seller in 0..SELLERS {
        for _ in 0..rng.range(1, MAX_PRODUCTS_PER_SELLER) {
            products.push(Product {
                id: ByteArray::from(rng.hex_id().to_vec()),
                seller,
                price: rng.range(500, 29_999),
                freight: rng.range(200, 4_999),
            });
        }
    }
    (sellers, products)
}

/// One order's status and timestamps (Unix seconds; `None` = did not happen).
struct Order {
    status: &'static str,
    purchase: i64,
    approved: Option<i64>,
    carrier: Option<i64>,
    customer: Option<i64>,
    estimated: i64,
}

/// Draws an order's lifecycle.
///
/// The status rule, read off the conformance orders (whose shares and null patterns it
/// reproduces: invoiced 2 %, approved 2 %, shipped 2 %, delivered 90 %, canceled 2 %,
/// unavailable 2 %): every order starts `invoiced` with only the purchase and estimated
/// timestamps; with 98 % it is approved (approved_at set), then with 98 % shipped
/// (carrier date set), then with 98 % delivered (customer date set); each step only happens if
/// the previous one did. Independently of that lifecycle, one more draw makes 2 % of the
/// orders `canceled` and another 2 % `unavailable` (exclusive, so each share is exactly 2 %);
/// those keep the timestamps of the stage they reached.
fn order(rng: &mut Rng) -> Order {
    let purchase = EPOCH_2016 + rng.range(0, 100_000_000 - 1);
    let mut o = Order {
        status: "invoiced",
        purchase,
        approved: None,
        carrier: None,
        customer: None,
        estimated: 0,
    };
    if rng.chance(0.98) {
        let approved = purchase + rng.range(0, 9_999);
        o.approved = Some(approved);
        o.status = "approved";
        if rng.chance(0.98) {
            let carrier = approved + rng.range(0, 9_999);
            o.carrier = Some(carrier);
            o.status = "shipped";
            if rng.chance(0.98) {
                o.customer = Some(carrier + rng.range(0, 99_999));
                o.status = "delivered";
            }
        }
    }
    o.estimated = purchase + rng.range(0, 99_999);
    let u = rng.unit();
    if u < 0.02 {
        o.status = "canceled";
    } else if u < 0.04 {
        o.status = "unavailable";
    }
    o
}

/// Writes `olist_orders_dataset*` and `olist_order_items_dataset*` into `p.out`.
///
/// Orders get 0–4 items until `p.items` items exist (the last order may get fewer). With
/// `--files K`, an order goes to part `⌊items before it · K / N⌋` together with all its items,
/// so both tables have K parts with about N/K items each and no order is split.
pub fn lookup(p: &LookupParams) -> Result<Summary, GenError> {
    create_dir(&p.out)?;
    let k = usize::from(p.files);
    let mut rng = Rng::new(p.seed, 0);
    let (sellers, products) = catalog(&mut rng);
    let mut orders = SplitTable::new(&p.out, ORDERS, p.format, &ORDER_COLS, k);
    let mut items = SplitTable::new(&p.out, ITEMS, p.format, &ITEM_COLS, k);
    let n = p.items;
    let mut emitted = 0u64;
    while emitted < n {
        let count = rng.below(MAX_ITEMS_PER_ORDER + 1).min(n - emitted);
        let o = order(&mut rng);
        let order_id = ByteArray::from(rng.hex_id().to_vec());
        let customer_id = rng.hex_id();
        let part = orders.part_of(emitted, n);

        let w = orders.part(part)?;
        w.shared(&order_id);
        w.text(&customer_id);
        w.text(o.status.as_bytes());
        w.datetime(Some(o.purchase));
        w.datetime(o.approved);
        w.datetime(o.carrier);
        w.datetime(o.customer);
        w.datetime(Some(o.estimated));
        w.end_row()?;

        let w = items.part(part)?;
        for item_id in 1..=count {
            let len = products.len() as u64;
            let prod = products.get(rng.below(len) as usize);
            let shipping_limit = o.estimated + rng.range(0, 99_999);
            w.shared(&order_id);
            w.int(item_id as i64);
            if let Some(prod) = prod {
                w.shared(&prod.id);
                if let Some(seller) = sellers.get(prod.seller) {
                    w.shared(seller);
                }
                w.datetime(Some(shipping_limit));
                w.cents(prod.price);
                w.cents(prod.freight);
            }
            w.end_row()?;
        }
        emitted += count;
    }
    let order_rows = orders.finish()?;
    let item_rows = items.finish()?;
    Ok(Summary {
        tables: vec![
            TableCount {
                table: ORDERS,
                files: k,
                rows: order_rows,
            },
            TableCount {
                table: ITEMS,
                files: k,
                rows: item_rows,
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shares_follow_the_rule() {
        let mut rng = Rng::new(5, 0);
        let n = 50_000;
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..n {
            let o = order(&mut rng);
            *counts.entry(o.status).or_insert(0u32) += 1;
            assert!(o.estimated >= o.purchase && o.estimated < o.purchase + 100_000);
            match o.status {
                "invoiced" => assert!(o.approved.is_none()),
                "approved" => assert!(o.approved.is_some() && o.carrier.is_none()),
                "shipped" => assert!(o.carrier.is_some() && o.customer.is_none()),
                "delivered" => assert!(o.customer.is_some()),
                _ => {}
            }
        }
        let share = |s: &str| f64::from(counts[s]) / f64::from(n);
        // Expected: 0.02·0.96, 0.98·0.02·0.96, 0.98²·0.02·0.96, 0.98³·0.96, 0.02, 0.02.
        for (s, want) in [
            ("invoiced", 0.0192),
            ("approved", 0.0188),
            ("shipped", 0.0184),
            ("delivered", 0.9035),
            ("canceled", 0.02),
            ("unavailable", 0.02),
        ] {
            assert!((share(s) - want).abs() < 0.004, "{s}: {}", share(s));
        }
    }
}
