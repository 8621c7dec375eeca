//! Unit tests of the toolbelt's Go-style flag parsing and usage text.

use super::*;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn go_flag_forms_all_parse_to_the_same_invocation() -> Result<(), ToolbeltError> {
    let want = parse(&args(&["stop_run", "-keyspace=ks", "-run_id=3"]))?;
    for form in [
        &["stop_run", "--keyspace=ks", "--run_id=3"][..],
        &["stop_run", "-keyspace", "ks", "-run_id", "3"],
        &["stop_run", "--keyspace", "ks", "-run_id=3"],
    ] {
        assert_eq!(parse(&args(form))?, want, "{form:?}");
    }
    assert_eq!(want.flags.get("run_id").map(String::as_str), Some("3"));
    Ok(())
}

#[test]
fn flag_errors_are_go_flag_errors() {
    let err = |a: &[&str]| parse(&args(a)).err().map(|e| e.to_string());
    assert_eq!(
        err(&["get_run_history", "-keyspace"]).as_deref(),
        Some("flag needs an argument: -keyspace")
    );
    assert_eq!(
        err(&["get_run_history", "-keyspace=k", "extra"]).as_deref(),
        Some("unexpected argument \"extra\"")
    );
    assert_eq!(
        err(&["frobnicate"]).as_deref(),
        Some("invalid command: frobnicate")
    );
}

#[test]
fn durations_print_as_go_prints_them() {
    assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(go_duration(Duration::from_micros(152_915)), "152.915ms");
    assert_eq!(go_duration(Duration::from_secs(125)), "2m5s");
    assert_eq!(go_duration(Duration::from_nanos(999)), "999ns");
    assert_eq!(go_duration(Duration::ZERO), "0s");
}
