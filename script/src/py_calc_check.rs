//! Load-time checks of py_calc calculated fields (spec §7.7); running them is the node's `pycalc`.
//!
//! A calculated field is a *Python* expression that Capillaries parses with the Go expression
//! parser only to find function calls and field references, so the same parser decides here
//! which texts are accepted; the text sent to Python is always the original.

use std::collections::{BTreeMap, BTreeSet};

use plexus_core::expr::{self, Expr};
use plexus_core::plan::{Field, PyField};
use plexus_core::value::Type;
use regex::Regex;

use crate::script;

/// Python builtins a calculated field may call with one argument without defining them.
const BUILTINS: [&str; 7] = ["str", "int", "float", "round", "len", "bool", "abs"];

/// One error: field path inside the node and message.
pub type PathError = (String, String);

/// Top-level function definitions found in the code: name → number of parameters.
///
/// Quirk (spec §7.7, #56): definitions are found textually, like Capillaries does: the line
/// must start with `def` and its parameter list may hold only names, `,`, `.`, quotes, blanks
/// and parentheses, so defaults (`=`), annotations, `*args` and multi-line lists are not seen.
pub fn python_defs(code: &str) -> BTreeMap<String, usize> {
    // The pattern is a constant, so building it cannot fail at run time.
    let re = Regex::new(
        r#"^def[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(([A-Za-z0-9_,.'" \t()]*)\)[ \t]*:"#,
    )
    .ok();
    let mut defs = BTreeMap::new();
    let Some(re) = re else { return defs };
    for line in code.lines() {
        if let Some(c) = re.captures(line) {
            let params = c.get(2).map_or("", |m| m.as_str());
            let n = if params.trim().is_empty() {
                0
            } else {
                params.split(',').filter(|p| !p.trim().is_empty()).count()
            };
            defs.insert(c[1].to_string(), n);
        }
    }
    defs
}

/// Validates a py_calc `p` section and returns its fields in computation order.
pub fn check(
    p: &script::Processor,
    code: &str,
    reader_fields: &[Field],
) -> Result<Vec<PyField>, Vec<PathError>> {
    let mut errs: Vec<PathError> = Vec::new();
    if p.calculated_fields.is_empty() {
        errs.push((
            "p.calculated_fields".into(),
            "py_calc needs at least one calculated field".into(),
        ));
        return Err(errs);
    }
    let defs = python_defs(code);
    let mut fields: BTreeMap<String, PyField> = BTreeMap::new();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, f) in &p.calculated_fields {
        let path = format!("p.calculated_fields.{name}.expression");
        let Some(ty) = Type::from_name(&f.field_type) else {
            errs.push((
                format!("p.calculated_fields.{name}.type"),
                script::unknown_type(&f.field_type),
            ));
            continue;
        };
        let ast = match expr::parse(&f.expression) {
            Ok(a) => a,
            Err(e) => {
                errs.push((path, format!("{:?}: {e}", f.expression)));
                continue;
            }
        };
        let mut field_deps = BTreeSet::new();
        match &ast.root {
            Expr::Call { .. } => {}
            Expr::Selector { x, .. } if x == "r" || x == "p" => {}
            _ => {
                errs.push((
                    path.clone(),
                    format!(
                        "{:?}: a calculated field must be a function call or a reader/calculated field reference (r.x, p.x)",
                        f.expression
                    ),
                ));
                continue;
            }
        }
        match ast.field_refs(true) {
            Ok(refs) => {
                for r in refs {
                    match r.alias.as_str() {
                        "r" if reader_fields.iter().any(|f| f.name == r.field) => {}
                        "p" if p.calculated_fields.contains_key(&r.field) => {
                            field_deps.insert(r.field.clone());
                        }
                        "r" | "p" => errs.push((
                            path.clone(),
                            format!("{:?}: unknown field {r}", f.expression),
                        )),
                        _ => errs.push((
                            path.clone(),
                            format!(
                                "{:?}: prohibited field {r}, only r.* and p.* may be used",
                                f.expression
                            ),
                        )),
                    }
                }
            }
            Err(e) => errs.push((path.clone(), format!("{:?}: {e}", f.expression))),
        }
        check_calls(&ast.root, &defs, &f.expression, &path, &mut errs);
        deps.insert(name.clone(), field_deps);
        fields.insert(
            name.clone(),
            PyField {
                name: name.clone(),
                ty,
                expression: f.expression.clone(),
            },
        );
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    // Computation order: a field after every field it reads (ties by name).
    let mut order = Vec::new();
    let mut done: BTreeSet<String> = BTreeSet::new();
    while done.len() < deps.len() {
        let next = deps
            .iter()
            .find(|(n, d)| !done.contains(*n) && d.iter().all(|x| done.contains(x)))
            .map(|(n, _)| n.clone());
        match next {
            Some(n) => {
                done.insert(n.clone());
                if let Some(f) = fields.remove(&n) {
                    order.push(f);
                }
            }
            None => {
                let left: Vec<&str> = deps
                    .keys()
                    .filter(|n| !done.contains(*n))
                    .map(String::as_str)
                    .collect();
                errs.push((
                    "p.calculated_fields".into(),
                    format!(
                        "calculated fields depend on each other in a cycle: {}",
                        left.join(", ")
                    ),
                ));
                return Err(errs);
            }
        }
    }
    Ok(order)
}

/// Checks the top-level call and, recursively, every call that is a direct argument of a
/// checked call (spec §7.7: a call inside an operator is not checked).
fn check_calls(
    e: &Expr,
    defs: &BTreeMap<String, usize>,
    src: &str,
    path: &str,
    errs: &mut Vec<PathError>,
) {
    let Expr::Call { func, args } = e else { return };
    if func.contains('.') {
        errs.push((
            path.to_string(),
            format!("{src:?}: cannot cast {func} to ident: only plain function names defined in the Python code or the builtins {} can be called here", BUILTINS.join(", ")),
        ));
    } else {
        let known = defs.get(func.as_str()).copied();
        let builtin = BUILTINS.contains(&func.as_str()) && args.len() == 1;
        match known {
            Some(n) if n == args.len() => {}
            _ if builtin => {}
            Some(n) => errs.push((
                path.to_string(),
                format!(
                    "{src:?}: function {func} is defined with {n} parameters but called with {}",
                    args.len()
                ),
            )),
            None => errs.push((
                path.to_string(),
                format!(
                    "{src:?}: function {func} is not defined at the top level of the Python code (a line starting with `def {func}(`)"
                ),
            )),
        }
    }
    for a in args {
        check_calls(a, defs, src, path, errs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defs_are_found_textually() {
        let code = "import math\ndef a(x, y):\n    return x\ndef b():\n  pass\n  def inner(z):\n    pass\ndef c(x=1):\n  pass\ndef d(x: int):\n  pass\n";
        let defs = python_defs(code);
        assert_eq!(defs.get("a"), Some(&2));
        assert_eq!(defs.get("b"), Some(&0));
        assert_eq!(
            defs.get("inner"),
            None,
            "methods/indented defs are never found"
        );
        assert_eq!(defs.get("c"), None, "defaults hide a definition (quirk)");
        assert_eq!(defs.get("d"), None, "annotations hide a definition (quirk)");
    }
}
