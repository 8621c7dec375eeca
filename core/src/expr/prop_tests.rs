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
