use super::*;

/// YAML text → JSON value or the error message.
fn y(text: &str) -> Result<serde_json::Value, String> {
    text_to_json(text, ScriptFormat::Yaml).map_err(|e| e.to_string())
}

#[test]
fn yaml_numbers_like_go_json() {
    assert_eq!(y("a: 10.0"), Ok(serde_json::json!({"a": 10})));
    assert_eq!(y("a: 0x10"), Ok(serde_json::json!({"a": 16})));
    assert_eq!(y("a: 1e3"), Ok(serde_json::json!({"a": 1000})));
    assert_eq!(y("a: 0.5"), Ok(serde_json::json!({"a": 0.5})));
    assert_eq!(y("a: 1_000"), Ok(serde_json::json!({"a": 1000})));
    assert_eq!(y("a: 010"), Ok(serde_json::json!({"a": 8})));
    assert_eq!(y("a: \"010\""), Ok(serde_json::json!({"a": "010"})));
    assert!(y("a: .inf").is_err_and(|e| e.contains("unsupported value")));
}

#[test]
fn yaml_scalars_and_keys() {
    assert_eq!(
        y(
            "a: yes\nb: on\nc: ~\nd: true\ne: 'x'\nf: 2020-01-01\ng: '2020-01-01'\nh: !!str 2020-01-01"
        ),
        Ok(
            serde_json::json!({"a": "yes", "b": "on", "c": null, "d": true, "e": "x",
            "f": "2020-01-01T00:00:00Z", "g": "2020-01-01", "h": "2020-01-01"})
        )
    );
    assert_eq!(
        y("- [\"2020-01-01\", 2020-01-01]"),
        Ok(serde_json::json!([["2020-01-01", "2020-01-01T00:00:00Z"]]))
    );
    for bad in ["2021: x", "true: x", "~: x", "1.5: x"] {
        let e = y(bad).unwrap_err();
        assert!(e.contains("is not a string"), "{bad}: {e}");
    }
    assert_eq!(
        y("\"2021\": x\n2021Q1: y"),
        Ok(serde_json::json!({"2021": "x", "2021Q1": "y"}))
    );
    let e = y("a: 1\nb:\n  c: 1\n  c: 2\n").unwrap_err();
    assert!(
        e.contains("mapping key \"c\" already defined") && e.contains("line"),
        "{e}"
    );
}

#[test]
fn json_duplicate_keys_last_wins_and_syntax_positions() {
    let v = text_to_json(r#"{"a": 1, "a": 2}"#, ScriptFormat::Json);
    assert_eq!(v.ok(), Some(serde_json::json!({"a": 2})));
    let e = text_to_json("{\n  \"a\": 1,,\n}", ScriptFormat::Json).unwrap_err();
    assert_eq!((e.line, e.column), (Some(2), Some(10)));
}

#[test]
fn suffixes() {
    assert_eq!(
        ScriptFormat::from_url("/a/b.json"),
        Some(ScriptFormat::Json)
    );
    assert_eq!(
        ScriptFormat::from_url("/a/b.yaml"),
        Some(ScriptFormat::Yaml)
    );
    assert_eq!(ScriptFormat::from_url("/a/b.yml"), None);
    assert_eq!(ScriptFormat::from_url("/a/b.JSON"), None);
}
