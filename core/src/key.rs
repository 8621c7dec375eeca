//! Index and order definitions and the key encoding that orders and matches rows (spec §6).
