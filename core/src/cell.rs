//! CSV cell values (spec §4.2–4.4): reading with `col_format`, default values, writing with `format`.
