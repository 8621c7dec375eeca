use super::*;

/// Params from a JSON literal.
fn params(json: &str) -> Params {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    Params::from_json_value(&v, "/p/params.json").unwrap_or_default()
}

/// Applies with params and unwraps the error text.
fn err(text: &str, p: Option<&Params>) -> String {
    match apply_template(text, "/s/script.json", p) {
        Ok(t) => panic!("expected an error, got {t}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bare_name_becomes_string_and_is_replaced() {
    let p = params(r#"{"a": "x\"y\\z\tq"}"#);
    let out = apply_template(
        r#"{"k": "{a}-{ a }-{a|string}-{ a | string }"}"#,
        "s",
        Some(&p),
    );
    assert_eq!(
        out.ok().as_deref(),
        Some("{\"k\": \"x\"y\\z\tq-x\"y\\z\tq-x\"y\\z\tq-x\"y\\z\tq\"}")
    );
}

#[test]
fn string_newlines_become_backslash_n() {
    let p = params(r#"{"a": "l1\nl2"}"#);
    let out = apply_template(r#""{a}""#, "s", Some(&p));
    assert_eq!(out.ok().as_deref(), Some(r#""l1\nl2""#));
}

#[test]
fn regex_quantifier_is_a_parameter_quirk_1() {
    let p = params(r#"{"x": "1"}"#);
    let e = err(r#"{"e": "re.MatchString(`[0-9]{2}`, r.a)"}"#, Some(&p));
    assert!(
        e.contains("unresolved parameter references {2|string}"),
        "{e}"
    );
    assert!(
        e.contains("/s/script.json") && e.contains("/p/params.json"),
        "{e}"
    );
    // `{2,3}` is not a reference.
    let out = apply_template(r#"{"e": "[0-9]{2,3}"}"#, "s", Some(&p));
    assert_eq!(out.ok().as_deref(), Some(r#"{"e": "[0-9]{2,3}"}"#));
}

#[test]
fn number_formats() {
    let p = params(r#"{"i": 10, "f": 0.5, "n": -3.0, "b": 1e20}"#);
    let out = apply_template(
        r#"["{i|number}","{f|number}","{ n | number }","{b|number}"]"#,
        "s",
        Some(&p),
    );
    assert_eq!(
        out.ok().as_deref(),
        Some("[10,0.500000,-3,100000000000000000000.000000]")
    );
}

#[test]
fn bool_and_stringlist() {
    let p = params(r#"{"t": true, "f": false, "l": ["a","b\"c"], "e": []}"#);
    let out = apply_template(
        r#"["{t|bool}","{f|bool}","{l|stringlist}","{e|stringlist}"]"#,
        "s",
        Some(&p),
    );
    assert_eq!(out.ok().as_deref(), Some(r#"[true,false,["a","b"c"],[]]"#));
}

#[test]
fn placement_error_names_ref_and_line() {
    let p = params(r#"{"n": 1}"#);
    let e = err("{\n\"a\": \"x{n|number}\",\n\"b\": {n|bool}}", Some(&p));
    assert!(
        e.contains("should not have extra characters between curly braces and double quotes"),
        "{e}"
    );
    assert!(
        e.contains("line 2: {n|number}") && e.contains("line 3: {n|bool}"),
        "{e}"
    );
    assert!(e.contains("/s/script.json"), "{e}");
}

#[test]
fn single_pass_inserted_values_not_rescanned_but_reported() {
    // `{b}` is inserted verbatim: not rescanned, and not in the `{b|string}` form the check sees.
    let p = params(r#"{"a": "{b}", "b": "x"}"#);
    let out = apply_template(r#""{a}-{b}""#, "s", Some(&p));
    assert_eq!(out.ok().as_deref(), Some(r#""{b}-x""#));
    let p = params(r#"{"a": "{b|string}", "b": "x"}"#);
    let e = err(r#""{a}""#, Some(&p));
    assert!(
        e.contains("unresolved parameter references {b|string}"),
        "{e}"
    );
}

#[test]
fn type_mismatch_stays_unresolved_and_lists_all() {
    let p = params(r#"{"a": "s", "n": 1}"#);
    let e = err(
        r#"["{a|number}", "{n}", "{z|bool}", "{a|number}"]"#,
        Some(&p),
    );
    assert!(e.contains("{a|number}, {n|string}, {z|bool} "), "{e}");
    assert!(
        e.contains("make sure that type in the script matches"),
        "{e}"
    );
}

#[test]
fn reserved_batch_idx_and_run_id_are_kept() {
    let out = apply_template(r#""/o/x_{batch_idx}_{ run_id }.csv""#, "s", None);
    assert_eq!(
        out.ok().as_deref(),
        Some(r#""/o/x_{batch_idx|string}_{run_id|string}.csv""#)
    );
    // Defined in params: substituted, as Capillaries does.
    let p = params(r#"{"run_id": "7"}"#);
    let out = apply_template(r#""{run_id}""#, "s", Some(&p));
    assert_eq!(out.ok().as_deref(), Some(r#""7""#));
}

#[test]
fn no_params_file_any_reference_is_an_error() {
    let e = err(r#"{"a": "{dir_in}/x", "n": "{n|number}"}"#, None);
    assert!(e.contains("{dir_in|string}, {n|number}"), "{e}");
    assert!(e.contains("no params file given"), "{e}");
    // Stringlist is not reported by the check (fails later as a type error), like Capillaries.
    assert!(apply_template(r#"{"u": "{l|stringlist}"}"#, "s", None).is_ok());
}

#[test]
fn unused_params_ignored_unsupported_types_rejected() {
    let p = params(r#"{"unused": "x"}"#);
    assert!(apply_template("{}", "s", Some(&p)).is_ok());
    for (json, what) in [
        (r#"{"o": {"a": 1}}"#, "(object)"),
        (r#"{"o": null}"#, "(null)"),
        (r#"{"o": [1, 2]}"#, "(array of number)"),
        (r#"{"o": ["a", 2]}"#, "element 1"),
    ] {
        let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
        let e = Params::from_json_value(&v, "/p/pp.json")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("parameter o: unsupported parameter type") && e.contains(what),
            "{e}"
        );
        assert!(e.contains("/p/pp.json"), "{e}");
    }
    let e = Params::from_json_value(&serde_json::json!([1]), "/p/pp.json")
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("expected an object"), "{e}");
}

#[test]
fn yaml_params_numbers_are_floats_and_timestamps_convert() {
    let p = Params::from_text(
        "n: 10\nf: 2.5\nd: 2016-01-01 00:00:00\nq: \"2016-01-01 00:00:00\"\n",
        ScriptFormat::Yaml,
        "p.yaml",
    );
    let p = p.unwrap_or_default();
    assert_eq!(p.values.get("n"), Some(&ParamValue::Number(10.0)));
    assert_eq!(p.values.get("f"), Some(&ParamValue::Number(2.5)));
    assert_eq!(
        p.values.get("d"),
        Some(&ParamValue::String("2016-01-01T00:00:00Z".into()))
    );
    assert_eq!(
        p.values.get("q"),
        Some(&ParamValue::String("2016-01-01 00:00:00".into()))
    );
    let e = Params::from_text("a: [1", ScriptFormat::Yaml, "/p/bad.yaml")
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.to_string().contains("/p/bad.yaml") && e.to_string().contains("line"),
        "{e}"
    );
}
