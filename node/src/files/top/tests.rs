//! The entries of a buffer with a memory limit, sized once instead of grown by doubling.

use plexus_core::expr::parse;
use plexus_core::key::parse_order_expr;
use plexus_core::plan::{FileColumn, PlanExpr, Top};
use plexus_core::value::{Type, Value};

use super::{RESERVE_AFTER_ROWS, TopBuffer};

fn column(name: &str, ty: Type) -> FileColumn {
    let src = format!("r.{name}");
    FileColumn {
        name: name.to_owned(),
        ty,
        expr: PlanExpr {
            ast: parse(&src).expect("a field reference parses"),
            src,
        },
        header: name.to_owned(),
        format: "%v".to_owned(),
        parquet_column: name.to_owned(),
    }
}

/// Once enough rows give their mean size, the entries get room for all a buffer holds before
/// its first spill: they are not moved again until then, and the rows come back in order.
#[test]
fn entries_are_sized_once_before_the_first_spill() {
    let columns = [column("k", Type::Int), column("s", Type::String)];
    let order =
        parse_order_expr("k(asc)", &|f| (f == "k").then_some(Type::Int)).expect("the order parses");
    let top = Top {
        order,
        limit: 1 << 20,
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut buf = TopBuffer::new(&top, &columns)
        .expect("a buffer")
        .with_spill(4 << 20, dir.path());
    let row = |i: i64| {
        vec![
            Value::Int((i * 7919) % 100_003),
            Value::str("payload-of-a-row"),
        ]
    };
    let mut i = 0i64;
    while buf.rows.len() <= RESERVE_AFTER_ROWS {
        buf.push(&row(i)).expect("a row is kept");
        i += 1;
    }
    let sized = (buf.rows.as_ptr(), buf.rows.capacity());
    assert!(sized.1 > 2 * RESERVE_AFTER_ROWS, "capacity {}", sized.1);
    while buf.spilled_runs() == 0 {
        assert_eq!(
            (buf.rows.as_ptr(), buf.rows.capacity()),
            sized,
            "row {i}: the entries moved before the first spill"
        );
        buf.push(&row(i)).expect("a row is kept");
        i += 1;
    }
    // Room for the rows that fit, with an eighth to spare: never the whole limit.
    assert!(
        i as usize <= sized.1,
        "{i} rows spilled, room for {}",
        sized.1
    );
    assert!(sized.1 < top.limit as usize, "capacity {}", sized.1);
    let mut want: Vec<(i64, i64)> = (0..i).map(|j| ((j * 7919) % 100_003, j)).collect();
    want.sort_unstable();
    let got: Vec<i64> = buf
        .into_sorted()
        .expect("the rows come back")
        .iter()
        .map(|r| match r.first() {
            Some(Value::Int(k)) => *k,
            other => panic!("row key {other:?}"),
        })
        .collect();
    let want: Vec<i64> = want.into_iter().map(|(k, _)| k).collect();
    assert_eq!(got, want);
}
