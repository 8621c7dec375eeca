//! Go time layouts (spec §5.9): parsing, formatting and `Time.String()`.
