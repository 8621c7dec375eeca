//! Go `fmt` formatting (spec §5.8): `fmt.Sprintf`, `%v` and the float and decimal text forms.
