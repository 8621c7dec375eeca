//! The order in which a script lists each table writer's fields (`w.fields`). The script
//! model keeps fields in maps sorted by name (the row layout), as Capillaries' Go maps lose
//! the order too; this reads the substituted script text once more, keeping only map keys in
//! the order written, so tables can be shown with their columns as the author wrote them.

use std::fmt;

use serde::de::{self, Deserialize, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::load::{LoadedScript, ScriptFormat};

/// A document reduced to the keys of its maps, in order.
enum Keys {
    /// A map: its keys in order, each with what it holds.
    Map(Vec<(String, Self)>),
    /// Anything else.
    Leaf,
}

/// A map key as text, whatever scalar YAML made it.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some(KeyText(k)) = m.next_key()? {
                    let v: Keys = m.next_value()?;
                    keys.push((k, v));
                }
                Ok(Keys::Map(keys))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Keys, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Keys::Leaf)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_none<E: de::Error>(self) -> Result<Keys, E> {
                Ok(Keys::Leaf)
            }
            fn visit_some<D2: de::Deserializer<'de>>(self, d: D2) -> Result<Keys, D2::Error> {
                Keys::deserialize(d)
            }
        }
        d.deserialize_any(V)
    }
}

impl Keys {
    fn get(&self, key: &str) -> Option<&Self> {
        match self {
            // JSON's last duplicate wins, as in the script model.
            Self::Map(m) => m.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            Self::Leaf => None,
        }
    }
}

/// The names of node `node`'s `w.fields` in the order the script lists them (each once);
/// empty when the text cannot be read that way (the caller then keeps the layout order).
pub fn field_order(loaded: &LoadedScript, node: &str) -> Vec<String> {
    let yaml = || Keys::deserialize(yaml_serde::Deserializer::from_str(&loaded.text)).ok();
    let json = || {
        let mut de = serde_json::Deserializer::from_str(&loaded.text);
        let k = Keys::deserialize(&mut de).ok();
        // Only a document that is read whole counts.
        de.end().ok().and(k)
    };
    // The origin may be a label without a suffix: JSON first, then YAML.
    let keys = match ScriptFormat::from_url(&loaded.script_url) {
        Some(ScriptFormat::Yaml) => yaml(),
        _ => json().or_else(yaml),
    };
    let Some(Keys::Map(fields)) = keys
        .as_ref()
        .and_then(|k| k.get("nodes"))
        .and_then(|n| n.get(node))
        .and_then(|n| n.get("w"))
        .and_then(|w| w.get("fields"))
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for (k, _) in fields {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_script_text;

    const JSON: &str = r#"{"nodes": {"read": {"type": "file_table",
        "r": {"urls": ["in.csv"], "columns": {"col_a": {"col_type": "int", "csv": {"col_idx": 0}}}},
        "w": {"name": "t", "fields": {
            "zeta": {"expression": "r.col_a", "type": "int"},
            "alpha": {"expression": "r.col_a", "type": "int"},
            "mid": {"expression": "r.col_a", "type": "int"}}}}}}"#;

    const YAML: &str = "nodes:\n  read:\n    type: file_table\n    r:\n      urls: [in.csv]\n      columns:\n        col_a: {col_type: int, csv: {col_idx: 0}}\n    w:\n      name: t\n      fields:\n        zeta: {expression: r.col_a, type: int}\n        alpha: {expression: r.col_a, type: int}\n        mid: {expression: r.col_a, type: int}\n";

    #[test]
    fn fields_come_in_the_order_the_script_lists_them_in_json_and_yaml() {
        for (text, format, origin) in [
            (JSON, ScriptFormat::Json, "s.json"),
            (YAML, ScriptFormat::Yaml, "s.yaml"),
            (JSON, ScriptFormat::Json, "a label"),
        ] {
            let loaded = load_script_text(&crate::source::LocalFiles, text, format, origin, None)
                .unwrap_or_else(|e| panic!("{origin}: {e}"));
            assert_eq!(
                field_order(&loaded, "read"),
                ["zeta", "alpha", "mid"],
                "{origin}"
            );
            assert!(field_order(&loaded, "nosuch").is_empty());
        }
    }
}
