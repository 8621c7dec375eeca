//! The loader never panics: arbitrary JSON values and arbitrary text only ever yield errors.

use plexus_script::LocalFiles;
use plexus_script::load::{ScriptFormat, load_script_text};
use plexus_script::template::Params;
use proptest::prelude::*;

/// Keys that steer generated values into the script model's fields.
const KEYS: &[&str] = &[
    "nodes",
    "dependency_policies",
    "type",
    "r",
    "l",
    "p",
    "w",
    "urls",
    "csv",
    "columns",
    "table",
    "expected_batches_total",
    "col_hdr",
    "col_idx",
    "fields",
    "indexes",
    "top",
    "limit",
    "rules",
    "is_default",
    "python_code_urls",
    "tag_criteria",
    "calculated_fields",
    "separator",
    "n",
];

/// Arbitrary JSON values, biased towards script-shaped keys and template-like strings.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-z{}|\" \\\\]{0,12}".prop_map(serde_json::Value::String),
        any::<String>().prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::vec(
                (prop::sample::select(KEYS).prop_map(str::to_string), inner),
                0..6
            )
            .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_values_never_panic(v in json_value(), p in json_value()) {
        let text = v.to_string();
        let params = Params::from_json_value(&p, "p.json").ok();
        let _ = load_script_text(&LocalFiles, &text, ScriptFormat::Json, "s.json", params.as_ref());
        let wrapped = serde_json::json!({"nodes": {"n": v}, "dependency_policies": {"d": p}}).to_string();
        let _ = load_script_text(&LocalFiles, &wrapped, ScriptFormat::Json, "s.json", params.as_ref());
        // The same value as YAML text (JSON is YAML flow syntax).
        let _ = load_script_text(&LocalFiles, &wrapped, ScriptFormat::Yaml, "s.yaml", params.as_ref());
    }

    #[test]
    fn arbitrary_text_never_panics(s in any::<String>(), t in "[-a-z0-9:{}|\"' \\n\\[\\],.#!&*~]{0,80}") {
        for text in [&s, &t] {
            let _ = load_script_text(&LocalFiles, text, ScriptFormat::Json, "s.json", None);
            let _ = load_script_text(&LocalFiles, text, ScriptFormat::Yaml, "s.yaml", None);
            let _ = Params::from_text(text, ScriptFormat::Yaml, "p.yaml");
            let _ = Params::from_text(text, ScriptFormat::Json, "p.json");
        }
    }
}
