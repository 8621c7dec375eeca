//! Parser tests: Go precedence, canonical text, accepted Go forms and Go's error messages.

use super::*;

fn p(src: &str) -> Expr {
    parse(src).unwrap_or_else(|e| panic!("{src}: {e}")).root
}

fn perr(src: &str) -> String {
    match parse(src) {
        Ok(a) => panic!("{src}: expected a parse error, got {a:?}"),
        Err(e) => e.to_string(),
    }
}

fn int(s: &str) -> Box<Expr> {
    Box::new(Expr::Int(s.into()))
}

fn sel(x: &str, s: &str) -> Box<Expr> {
    Box::new(Expr::Selector {
        x: x.into(),
        sel: s.into(),
    })
}

fn bin(op: BinaryOp, x: Box<Expr>, y: Box<Expr>) -> Box<Expr> {
    Box::new(Expr::Binary { op, x, y })
}

#[test]
fn precedence_and_associativity() {
    use BinaryOp as B;
    assert_eq!(
        p("1 + 2 * 3"),
        *bin(B::Add, int("1"), bin(B::Mul, int("2"), int("3")))
    );
    assert_eq!(
        p("1 - 2 - 3"),
        *bin(B::Sub, bin(B::Sub, int("1"), int("2")), int("3"))
    );
    assert_eq!(
        p("r.a || r.b && r.c"),
        *bin(
            B::LOr,
            sel("r", "a"),
            bin(B::LAnd, sel("r", "b"), sel("r", "c"))
        )
    );
    assert_eq!(
        p("1 < 2 == true"),
        *bin(
            B::Eql,
            bin(B::Lss, int("1"), int("2")),
            Box::new(Expr::Ident("true".into()))
        )
    );
    assert_eq!(
        p("-r.a * 2"),
        *bin(
            B::Mul,
            Box::new(Expr::Unary {
                op: UnaryOp::Neg,
                x: sel("r", "a")
            }),
            int("2")
        )
    );
    assert_eq!(
        p("1 << 2 + 3"),
        *bin(B::Add, bin(B::Shl, int("1"), int("2")), int("3"))
    );
    assert_eq!(
        p("1 | 2 == 3"),
        *bin(B::Eql, bin(B::Or, int("1"), int("2")), int("3"))
    );
    assert_eq!(
        p("1 &^ 2 * 3"),
        *bin(B::Mul, bin(B::AndNot, int("1"), int("2")), int("3"))
    );
    assert_eq!(
        p("r.a > 5 && r.b < 10"),
        *bin(
            B::LAnd,
            bin(B::Gtr, sel("r", "a"), int("5")),
            bin(B::Lss, sel("r", "b"), int("10"))
        )
    );
}

#[test]
fn node_shapes() {
    assert_eq!(
        p(r#"time.Parse("2006", r.s)"#),
        Expr::Call {
            func: "time.Parse".into(),
            args: vec![
                Expr::Str {
                    raw: "\"2006\"".into(),
                    backquoted: false
                },
                *sel("r", "s")
            ]
        }
    );
    assert_eq!(
        p("`a\r\nb`"),
        Expr::Str {
            raw: "`a\nb`".into(),
            backquoted: true
        }
    );
    assert_eq!(p("(r.a)"), Expr::Paren(sel("r", "a")));
    assert!(matches!(p("a.b.c"), Expr::BadSelector { .. }));
    assert!(matches!(p("f(x).y"), Expr::BadSelector { .. }));
    assert!(matches!(p("a.b.c(1)"), Expr::BadCall { .. }));
    assert!(matches!(p("(f)(1)"), Expr::BadCall { .. }));
    assert_eq!(p("len(r.s...)"), p("len(r.s)"));
    assert_eq!(p("1.5e3"), Expr::Float("1.5e3".into()));
    assert_eq!(p("'a'"), Expr::Char("'a'".into()));
    assert_eq!(p("2i"), Expr::Imag("2i".into()));
    assert_eq!(p("r.a // comment"), *sel("r", "a"));
    assert_eq!(
        p("r.a /* c */ + 1"),
        *bin(BinaryOp::Add, sel("r", "a"), int("1"))
    );
    assert_eq!(p("  r.a\n"), *sel("r", "a"));
    assert_eq!(p("\u{feff}r.a"), *sel("r", "a"));
    assert_eq!(p("f(\n1,\n2,\n)"), p("f(1, 2)"));
}

#[test]
fn other_go_forms_parse() {
    for (src, kind) in [
        ("r.s[0]", UnsupportedKind::Index),
        ("r.s[1:2]", UnsupportedKind::Slice),
        ("r.s[:]", UnsupportedKind::Slice),
        ("r.s[1:2:3]", UnsupportedKind::Slice),
        ("f[int, string]", UnsupportedKind::Index),
        ("x.(int)", UnsupportedKind::TypeAssert),
        ("x.(type)", UnsupportedKind::TypeAssert),
        ("[]int{1, 2}", UnsupportedKind::CompositeLit),
        ("[...]int{1}", UnsupportedKind::CompositeLit),
        (r#"map[string]int{"a": 1}"#, UnsupportedKind::CompositeLit),
        ("T{a: 1, b: {2}}", UnsupportedKind::CompositeLit),
        ("struct{}{}", UnsupportedKind::CompositeLit),
        ("func(x int) int { return x }", UnsupportedKind::FuncLit),
        ("[]byte", UnsupportedKind::Type),
        ("chan int", UnsupportedKind::Type),
        ("<-chan int", UnsupportedKind::Type),
        ("interface{}", UnsupportedKind::Type),
    ] {
        match p(src) {
            Expr::Unsupported { kind: k, text, .. } => {
                assert_eq!(k, kind, "{src}");
                assert_eq!(text, src, "{src}");
            }
            other => panic!("{src}: {other:?}"),
        }
    }
    for src in [
        "func(x int) int { return x }(1)",
        "[]byte(r.s)",
        "interface{}(x)",
        "*p",
        "&x",
        "<-ch",
        "~x",
        "^x",
        "+x",
    ] {
        parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    }
}

#[test]
fn canonical_text_round_trips() {
    for (src, canon) in [
        ("r.a*3+r.b-7", "r.a * 3 + r.b - 7"),
        ("  r.a  >5&&r.b<10 ", "r.a > 5 && r.b < 10"),
        ("- -r.a", "- -r.a"),
        ("-(-r.a)", "-(-r.a)"),
        ("!r.b", "!r.b"),
        ("& ^x", "& ^x"),
        ("(sum(l.x))", "(sum(l.x))"),
        (
            "fmt.Sprintf(\"%d\",r.a ,r.b)",
            "fmt.Sprintf(\"%d\", r.a, r.b)",
        ),
        ("`raw`+\"x\"", "`raw` + \"x\""),
        ("a.b.c( 1 )", "a.b.c(1)"),
        ("010 + 1.5e3 + .5", "010 + 1.5e3 + .5"),
        ("r.s[ 1 ]", "r.s[ 1 ]"),
        ("string_agg(l.n, \",\")", "string_agg(l.n, \",\")"),
    ] {
        let ast = parse(src).unwrap();
        assert_eq!(ast.to_string(), canon, "{src}");
        assert_eq!(parse(canon).unwrap(), ast, "{src}");
    }
}

#[test]
fn go_error_messages() {
    for (src, msg) in [
        ("", "1:1: expected operand, found 'EOF'"),
        ("(1+2", "1:5: expected ')', found newline"),
        ("len(", "1:5: expected ')', found 'EOF'"),
        ("f(1, ", "1:6: expected ')', found 'EOF'"),
        ("1 +", "1:4: expected operand, found 'EOF'"),
        ("1 + )", "1:5: expected operand, found ')'"),
        ("r.a = 5", "1:5: expected '==', found '='"),
        ("1 2", "1:3: expected 'EOF', found 2"),
        ("r.a r.b", "1:5: expected 'EOF', found r"),
        ("r.a\n+1", "2:1: expected 'EOF', found '+'"),
        ("f(a b)", "1:5: missing ',' in argument list"),
        (
            "f(r.a // 2)",
            "1:12: missing ',' before newline in argument list",
        ),
        (
            "r.",
            "1:3: expected selector or type assertion, found 'EOF'",
        ),
        ("r.1", "1:2: expected 'EOF', found .1"),
        ("a[]", "1:3: expected operand, found ']'"),
        ("if", "1:1: expected operand, found 'if'"),
        ("r.a := 1", "1:5: expected 'EOF', found ':='"),
        ("#", "1:1: invalid character U+0023 '#'"),
        ("r.a ? 1", "1:5: invalid character U+003F '?'"),
        (
            "\u{201c}x\u{201d}",
            "1:1: curly quotation mark '\u{201c}' (use neutral '\"') (and 1 more errors)",
        ),
        ("\"abc", "1:1: string literal not terminated"),
        ("`abc", "1:1: raw string literal not terminated"),
        (r#""\d""#, "1:3: unknown escape sequence"),
        (
            r#""\x4""#,
            "1:5: illegal character U+0022 '\"' in escape sequence",
        ),
        ("'ab'", "1:1: illegal rune literal"),
        ("''", "1:1: illegal rune literal"),
        ("'a", "1:1: rune literal not terminated"),
        ("09", "1:2: invalid digit '9' in octal literal"),
        ("1__0", "1:3: '_' must separate successive digits"),
        ("0x", "1:3: hexadecimal literal has no digits"),
        ("1e", "1:3: exponent has no digits"),
        ("0x1.5", "1:6: hexadecimal mantissa requires a 'p' exponent"),
        ("0b2", "1:3: invalid digit '2' in binary literal"),
        ("1 \"abc", "1:3: string literal not terminated"),
        (
            "(1 2 \"abc",
            "1:4: expected ')', found 2 (and 1 more errors)",
        ),
        ("/* x", "1:1: comment not terminated"),
        ("r.s[1::3]", "1:6: middle index required in 3-index slice"),
        ("r.s[1:2:]", "1:8: final index required in 3-index slice"),
        ("f(x))", "1:5: expected 'EOF', found ')'"),
        (
            "sum(l.x",
            "1:8: missing ',' before newline in argument list",
        ),
    ] {
        assert_eq!(perr(src), msg, "{src:?}");
    }
}

#[test]
fn nesting_limit() {
    let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
    assert!(perr(&deep).contains("exceeded max nesting depth"));
    let deep = format!("{}1", "- ".repeat(5000));
    assert!(perr(&deep).contains("exceeded max nesting depth"));
    let long = vec!["1"; 5000].join("+");
    assert!(perr(&long).contains("exceeded max nesting depth"));
}

/// Every tree walk (parse, display, field refs, compile, eval, check, serde) of the deepest
/// accepted shapes fits a 2 MiB thread stack, even in debug builds.
#[test]
fn deepest_accepted_expressions_fit_a_small_stack() {
    use crate::value::{Type, Value};
    let shapes = [
        vec!["1"; 990].join("+"),
        vec!["r.s"; 900].join(" + "),
        format!("{}1{}", "(".repeat(199), ")".repeat(199)),
        format!("{}1", "- ".repeat(199)),
        format!("{}true", "!".repeat(199)),
        format!("{}1{}", "int(".repeat(199), ")".repeat(199)),
    ];
    for src in shapes {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let ast = parse(&src).unwrap();
                let sc = Scope::new().with_alias(Alias::R, [("s", Type::String)]);
                ast.field_refs(false).unwrap();
                let c = prepare(&ast, &sc).unwrap();
                let r = vec![Value::str("x")];
                c.eval(&Vars::new().with(Alias::R, &r), Rounding::None)
                    .unwrap();
                let _ = check(&ast, &sc, Type::Int, AggPolicy::Forbidden);
                let json = serde_json::to_string(&ast).unwrap();
                let back: Ast = serde_json::from_str(&json).unwrap();
                assert!(back == ast);
                let bytes =
                    bincode::serde::encode_to_vec(&ast, bincode::config::standard()).unwrap();
                let (back, _): (Ast, usize) =
                    bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
                assert!(back == ast);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}

#[test]
fn ast_serializes_as_text() {
    let ast = parse("r.a*3 + len(r.s)").unwrap();
    assert_eq!(
        serde_json::to_string(&ast).unwrap(),
        r#""r.a * 3 + len(r.s)""#
    );
    let back: Ast = serde_json::from_str(r#""r.a*3+len(r.s)""#).unwrap();
    assert_eq!(back, ast);
    assert!(serde_json::from_str::<Ast>(r#""r.a +""#).is_err());
    assert_eq!(parse("1 .x").unwrap().to_string(), "1 .x");
    assert_eq!(
        parse(&parse("1 .x").unwrap().to_string()).unwrap(),
        parse("1 .x").unwrap()
    );
}
