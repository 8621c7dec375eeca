//! Per-row evaluation cost of representative writer expressions (compiled once, evaluated
//! many times). Targets on a 2-core machine: ≤ 50 ns for arithmetic and comparison, ≤ 500 ns
//! for `fmt.Sprintf` and a regex match.

use std::hint::black_box;
use std::str::FromStr;

use criterion::{Criterion, criterion_group, criterion_main};
use plexus_core::expr::{Alias, Compiled, Rounding, Scope, Vars, parse, prepare};
use plexus_core::value::{Type, Value};
use rust_decimal::Decimal;

fn scope() -> Scope {
    Scope::new().with_alias(
        Alias::R,
        [
            ("a", Type::Int),
            ("b", Type::Int),
            ("price", Type::Decimal2),
            ("freight", Type::Decimal2),
            ("s1", Type::String),
            ("s2", Type::String),
            ("s", Type::String),
            ("i", Type::Int),
            ("d", Type::Decimal2),
            ("f", Type::Float),
            ("spec", Type::String),
        ],
    )
}

fn row() -> Vec<Value> {
    let dec = |s: &str| Value::Decimal(Decimal::from_str(s).unwrap_or_default());
    vec![
        Value::Int(7),
        Value::Int(3),
        dec("129.90"),
        dec("12.37"),
        Value::str("order-000123"),
        Value::str("seller-42"),
        Value::str("BRL"),
        Value::Int(42),
        dec("1234.5"),
        Value::Float(19.5),
        Value::str("Boys shoes, leather, size 10"),
    ]
}

fn compiled(src: &str) -> Compiled {
    let ast = parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    prepare(&ast, &scope()).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn bench(c: &mut Criterion) {
    let r = row();
    let vars = Vars::new().with(Alias::R, &r);
    let cases: [(&str, &str, Rounding); 6] = [
        ("int_arith", "r.a*3+r.b-7", Rounding::None),
        ("decimal2_add_to2", "r.price+r.freight", Rounding::To2),
        ("string_concat", r#"r.s1+"-"+r.s2"#, Rounding::None),
        (
            "sprintf",
            r#"fmt.Sprintf("%s|%d|%s|%.2f", r.s, r.i, r.d, r.f)"#,
            Rounding::None,
        ),
        (
            "regex_match",
            r#"re.MatchString(`[\w ,]*Boys[\w ,]*`, r.spec)"#,
            Rounding::None,
        ),
        ("comparison", "r.a > 5 && r.b < 10", Rounding::None),
    ];
    let mut group = c.benchmark_group("expr_eval");
    for (name, src, rounding) in cases {
        let expr = compiled(src);
        // Sanity: every benchmarked expression evaluates.
        if let Err(e) = expr.eval(&vars, rounding) {
            panic!("{src}: {e}");
        }
        group.bench_function(name, |b| {
            b.iter(|| black_box(expr.eval(black_box(&vars), rounding)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
