//! decimal2 helpers (spec §4.3, §4.7, §5.6): rounding, float conversion and canonical text.
