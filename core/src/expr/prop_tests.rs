//! Property tests: arbitrary text and token soups never panic anywhere in the pipeline, and
//! the canonical text of every parsed expression parses back to the same tree.

use proptest::prelude::*;

use super::tests::{row, scope};
use super::*;
use crate::value::{Type, Value};

const TOKENS: &[&str] = &[
    "r.i",
    "r.s",
    "r.d",
    "r.f",
    "r.t",
    "r.b",
    "l.x",
    "l.y",
    "l.n",
    "l.c",
    "w.a",
    "r.zz",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&",
    "|",
    "^",
    "<<",
    ">>",
    "&^",
    "&&",
    "||",
    "<-",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "=",
    ":=",
    "!",
    "~",
    "...",
    ":",
    ";",
    "++",
    "1",
    "0",
    "010",
    "09",
    "0x1F",
    "1_000",
    "9223372036854775808",
    "1.5",
    ".5",
    "1.",
    "1e400",
    "0x1p-2",
    "2i",
    "'a'",
    "'ab'",
    "\"s\"",
    "\"",
    "`raw`",
    "`",
    "\"\\d\"",
    "\"\\\"\"",
    "len",
    "sum",
    "count",
    "avg",
    "min_if",
    "string_agg",
    "int.iif",
    "time.Parse",
    "time.Format",
    "fmt.Sprintf",
    "re.MatchString",
    "strings.ReplaceAll",
    "time.January",
    "time.UTC",
    "time.Date",
    "time.Now",
    "time.DiffMilli",
    "math.Sqrt",
    "decimal2",
    "float",
    "string",
    "int",
    "wfmodel.RunStart",
    "true",
    "false",
    "nil",
    "func",
    "map",
    "chan",
    "struct",
    "interface",
    "type",
    "if",
    "x",
    "\n",
    "//",
    "/*",
    "*/",
    "#",
    "é",
    "\u{201c}",
    "\"%d\"",
    "`\\w+`",
    "\"(\"",
];

fn exercise(src: &str) {
    let Ok(ast) = parse(src) else {
        return;
    };
    let _ = ast.field_refs(true);
    let _ = ast.field_refs(false);
    let _ = ast.root_aggregate();
    let _ = ast.contains_aggregate();
    let text = ast.to_string();
    match parse(&text) {
        Ok(back) => assert_eq!(back, ast, "{src:?} → {text:?}"),
        Err(e) => panic!("{src:?} → {text:?}: {e}"),
    }
    let sc = scope();
    if let Ok(c) = prepare(&ast, &sc) {
        let r = row();
        let l = vec![
            Value::Int(3),
            Value::Decimal(rust_decimal::Decimal::ONE),
            Value::Float(0.5),
            Value::str("x"),
            Value::Bool(true),
        ];
        let vars = Vars::new().with(Alias::R, &r).with(Alias::L, &l);
        let _ = c.eval(&vars, Rounding::None);
        let _ = c.eval(&vars, Rounding::To2);
        let _ = c.eval(&Vars::new(), Rounding::None);
        if let Some(mut acc) = c.new_accumulator() {
            let _ = acc.update(&c, &vars, Rounding::To2);
            let _ = acc.update(&c, &vars, Rounding::To2);
            let _ = acc.finish();
        }
    }
    for t in Type::ALL {
        let _ = check(&ast, &sc, t, AggPolicy::RootOnly);
    }
    let _ = check(&ast, &sc, Type::Int, AggPolicy::Forbidden);
    let _ = check_zero(&ast, &Scope::dependency_policy(), Type::Bool);
}

const LEAVES: &[&str] = &[
    "r.i",
    "r.j",
    "r.s",
    "r.e",
    "r.d",
    "r.d2",
    "r.f",
    "r.t",
    "r.t2",
    "r.b",
    "r.q",
    "l.x",
    "l.y",
    "l.n",
    "l.c",
    "1",
    "0",
    "010",
    "1.5",
    "0.0",
    "\"a\"",
    "`b`",
    "\"2006-01-02\"",
    "true",
    "false",
    "time.January",
    "time.UTC",
    "9223372036854775807",
    "100000000000000000000",
];

const OPS: &[&str] = &[
    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "<<", "&",
];

const FUNCS: &[&str] = &[
    "len",
    "string",
    "int",
    "float",
    "decimal2",
    "int.iif",
    "float.iif",
    "string.iif",
    "decimal2.iif",
    "time.iif",
    "math.Sqrt",
    "math.Round",
    "time.Parse",
    "time.Format",
    "time.Date",
    "time.Now",
    "time.Unix",
    "time.UnixMilli",
    "time.DiffMilli",
    "time.Before",
    "time.After",
    "time.FixedZone",
    "re.MatchString",
    "strings.ReplaceAll",
    "fmt.Sprintf",
    "sum",
    "count",
    "avg",
    "min",
    "max_if",
    "count_if",
    "string_agg",
    "string_agg_if",
    "foo",
];

/// Well-formed Go expressions over the test scope.
fn expr_strategy() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(LEAVES).prop_map(str::to_owned);
    leaf.prop_recursive(5, 48, 4, |inner| {
        prop_oneof![
            (inner.clone(), prop::sample::select(OPS), inner.clone())
                .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
            (prop::sample::select(&["-", "!", "+"][..]), inner.clone())
                .prop_map(|(op, a)| format!("{op} {a}")),
            inner.clone().prop_map(|a| format!("({a})")),
            (
                prop::sample::select(FUNCS),
                prop::collection::vec(inner.clone(), 0..4)
            )
                .prop_map(|(f, args)| format!("{f}({})", args.join(", "))),
            (inner.clone(), inner).prop_map(|(a, b)| format!("{a}[{b}]")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn generated_expressions_never_panic(src in expr_strategy()) {
        prop_assert!(parse(&src).is_ok(), "{}", src);
        exercise(&src);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,48}") {
        exercise(&s);
    }

    #[test]
    fn arbitrary_unicode_never_panics(s in any::<String>()) {
        exercise(&s);
    }

    #[test]
    fn token_soup_never_panics(
        toks in prop::collection::vec(prop::sample::select(TOKENS), 0..24),
        spaced in any::<bool>(),
    ) {
        exercise(&toks.join(if spaced { " " } else { "" }));
    }
}

/// A value of column type `ty` from `n`, `text` and `small`, small numbers and short or
/// empty strings often, so that aggregates tie, change and cross zero.
fn column_value(ty: Type, n: i64, text: &str, small: bool) -> Value {
    let n = if small { n % 7 } else { n };
    match ty {
        Type::String => Value::str(if small {
            &text[..text.char_indices().nth(2).map_or(text.len(), |(i, _)| i)]
        } else {
            text
        }),
        Type::Int => Value::Int(n),
        Type::Float => Value::Float(n as f64 / 8.0),
        Type::Bool => Value::Bool(n & 1 == 1),
        Type::DateTime => Value::Time(crate::value::Time::from_unix_millis(n >> 2)),
        Type::Decimal2 => Value::Decimal(rust_decimal::Decimal::new(n >> 12, 2)),
    }
}

proptest! {
    /// An accumulator fed a bare field's cells (strings borrowed) reaches the state, the
    /// final value and the failures that evaluating the decoded rows reaches, for every
    /// aggregate of that shape over every column type.
    #[test]
    fn aggregates_fed_cells_equal_aggregates_fed_rows(
        column in 0usize..6,
        func in prop::sample::select(&["count()", "sum", "avg", "min", "max", "string_agg"][..]),
        rows in prop::collection::vec((any::<i64>(), any::<String>(), any::<bool>()), 0..24),
    ) {
        let (name, ty) = [
            ("i", Type::Int),
            ("f", Type::Float),
            ("d", Type::Decimal2),
            ("s", Type::String),
            ("b", Type::Bool),
            ("t", Type::DateTime),
        ][column];
        let src = match func {
            "count()" => func.to_owned(),
            "string_agg" => format!("string_agg(r.{name}, \"; \")"),
            f => format!("{f}(r.{name})"),
        };
        let c = prepare(&parse(&src).unwrap(), &scope()).unwrap();
        let arg = c.aggregate_field().unwrap();
        let slot = scope().resolve("r", name).unwrap().1;
        prop_assert_eq!(arg, (func != "count()").then_some((Alias::R, slot)));
        let mut by_row = c.new_accumulator().unwrap();
        let mut by_cell = by_row.clone();
        let mut r = row();
        for (n, text, small) in &rows {
            let v = column_value(ty, *n, text, *small);
            r[slot] = v.clone();
            let a = by_row.update(&c, &Vars::new().with(Alias::R, &r), Rounding::To2);
            let cell = match &v {
                Value::Str(s) => crate::row::CellRef::Str(s),
                v => crate::row::CellRef::Value(v.clone()),
            };
            let b = by_cell.update_cell(&c, arg.map(|_| &cell), Rounding::To2);
            prop_assert_eq!(a.is_ok(), b.is_ok(), "{} on {:?}", src, v);
            prop_assert_eq!(&by_row, &by_cell, "{} on {:?}", src, v);
            prop_assert_eq!(by_row.heap_bytes(), by_cell.heap_bytes());
        }
        prop_assert_eq!(by_row.finish(), by_cell.finish());
    }
}

#[test]
fn only_aggregates_of_one_bare_field_read_cells() {
    let sc = scope();
    let arg = |src: &str| {
        prepare(&parse(src).unwrap(), &sc)
            .unwrap()
            .aggregate_field()
    };
    let s = sc.resolve("r", "s").unwrap().1;
    assert_eq!(arg("count()"), Some(None));
    assert_eq!(arg("max(r.s)"), Some(Some((Alias::R, s))));
    assert_eq!(arg("string_agg(r.s, \",\")"), Some(Some((Alias::R, s))));
    for other in [
        "sum(r.i + 1)",
        "sum_if(r.i, r.b)",
        "count_if(r.b)",
        "string_agg_if(r.s, \",\", r.b)",
        "r.s",
        "len(r.s)",
    ] {
        assert_eq!(arg(other), None, "{other}");
    }
}
