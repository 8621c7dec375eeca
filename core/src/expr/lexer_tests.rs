//! Lexer tests: Go token kinds, number literals, operators and automatic semicolons.

use super::*;

fn toks(src: &str) -> Vec<(Tok, String)> {
    let mut l = Lexer::new(src);
    let mut out = Vec::new();
    loop {
        let t = l.scan();
        out.push((t.tok, t.lit.to_owned()));
        if t.tok == Tok::Eof {
            break;
        }
    }
    out
}

#[test]
fn semicolon_insertion() {
    assert_eq!(
        toks("a\n+"),
        vec![
            (Tok::Ident, "a".into()),
            (Tok::Semicolon, "\n".into()),
            (Tok::Add, "+".into()),
            (Tok::Eof, "".into())
        ]
    );
    assert_eq!(toks("1")[1], (Tok::Semicolon, "\n".into()));
}

#[test]
fn numbers() {
    for (src, tok) in [
        ("1", Tok::Int),
        ("010", Tok::Int),
        ("0x1F", Tok::Int),
        ("1_000", Tok::Int),
        ("1.", Tok::Float),
        (".5", Tok::Float),
        ("1e3", Tok::Float),
        ("0x1p-2", Tok::Float),
        ("1_0.5", Tok::Float),
        ("2i", Tok::Imag),
    ] {
        let mut l = Lexer::new(src);
        let t = l.scan();
        assert_eq!((t.tok, t.lit), (tok, src), "{src}");
        assert!(l.errors.is_empty(), "{src}: {:?}", l.errors);
    }
    let mut l = Lexer::new("09");
    l.scan();
    assert_eq!(l.errors[0].msg, "invalid digit '9' in octal literal");
    let mut l = Lexer::new("1__0");
    l.scan();
    assert_eq!(l.errors[0].msg, "'_' must separate successive digits");
}

#[test]
fn operators() {
    let got: Vec<Tok> = toks("&^ &&<-<<= ... := !=")
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(
        got,
        vec![
            Tok::AndNot,
            Tok::LAnd,
            Tok::Arrow,
            Tok::ShlAssign,
            Tok::Ellipsis,
            Tok::Define,
            Tok::Neq,
            Tok::Eof
        ]
    );
}
