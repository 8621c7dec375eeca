//! CQL column types: their `[option]` encoding, value validation, literal parsing and the
//! order-preserving encoding used to sort clustering keys.

use std::net::IpAddr;

use super::frame::Writer;

/// A CQL type the double knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CqlType {
    /// `ascii`.
    Ascii,
    /// `text` / `varchar`.
    Text,
    /// `bigint`.
    Bigint,
    /// `int`.
    Int,
    /// `double`.
    Double,
    /// `boolean`.
    Boolean,
    /// `timestamp` (milliseconds since the epoch).
    Timestamp,
    /// `decimal` (scale and unscaled varint).
    Decimal,
    /// `blob`.
    Blob,
    /// `uuid` (system tables only).
    Uuid,
    /// `inet` (system tables only).
    Inet,
    /// `list<T>` (system tables and `IN ?` markers).
    List(Box<Self>),
    /// `set<T>` (system tables only).
    Set(Box<Self>),
    /// `map<K, V>` (system tables only).
    Map(Box<Self>, Box<Self>),
}

/// A literal written in a statement's text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    /// `'…'`.
    Str(String),
    /// An integer or decimal number as written (possibly with a sign or exponent).
    Number(String),
    /// `true` / `false`.
    Bool(bool),
    /// `0x…`.
    Hex(Vec<u8>),
    /// `null`.
    Null,
}

impl CqlType {
    /// Parses a column type of `CREATE TABLE`; only the types user tables may use.
    pub(crate) fn from_ddl(name: &str) -> Option<Self> {
        Some(match name {
            "text" | "varchar" => Self::Text,
            "ascii" => Self::Ascii,
            "bigint" => Self::Bigint,
            "int" => Self::Int,
            "double" => Self::Double,
            "boolean" => Self::Boolean,
            "timestamp" => Self::Timestamp,
            "decimal" => Self::Decimal,
            "blob" => Self::Blob,
            _ => return None,
        })
    }

    /// The CQL name, as `system_schema.columns.type` shows it.
    pub(crate) fn cql_name(&self) -> String {
        match self {
            Self::Ascii => "ascii".into(),
            Self::Text => "text".into(),
            Self::Bigint => "bigint".into(),
            Self::Int => "int".into(),
            Self::Double => "double".into(),
            Self::Boolean => "boolean".into(),
            Self::Timestamp => "timestamp".into(),
            Self::Decimal => "decimal".into(),
            Self::Blob => "blob".into(),
            Self::Uuid => "uuid".into(),
            Self::Inet => "inet".into(),
            Self::List(t) => format!("frozen<list<{}>>", t.cql_name()),
            Self::Set(t) => format!("frozen<set<{}>>", t.cql_name()),
            Self::Map(k, v) => format!("frozen<map<{}, {}>>", k.cql_name(), v.cql_name()),
        }
    }

    /// Writes the `[option]` type descriptor of result and bind metadata.
    pub(crate) fn write_option(&self, w: &mut Writer) {
        match self {
            Self::Ascii => w.u16(0x0001),
            Self::Bigint => w.u16(0x0002),
            Self::Blob => w.u16(0x0003),
            Self::Boolean => w.u16(0x0004),
            Self::Decimal => w.u16(0x0006),
            Self::Double => w.u16(0x0007),
            Self::Int => w.u16(0x0009),
            Self::Timestamp => w.u16(0x000B),
            Self::Uuid => w.u16(0x000C),
            Self::Text => w.u16(0x000D),
            Self::Inet => w.u16(0x0010),
            Self::List(t) => {
                w.u16(0x0020);
                t.write_option(w);
            }
            Self::Map(k, v) => {
                w.u16(0x0021);
                k.write_option(w);
                v.write_option(w);
            }
            Self::Set(t) => {
                w.u16(0x0022);
                t.write_option(w);
            }
        }
    }

    /// Checks that `b` is a well-formed serialized value of this type, as Cassandra's
    /// type validators do before a write.
    pub(crate) fn validate(&self, b: &[u8]) -> Result<(), String> {
        let fixed = |n: usize, name: &str| {
            if b.len() == n || b.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "Expected {n} or 0 byte long for {name} ({})",
                    b.len()
                ))
            }
        };
        match self {
            Self::Bigint => fixed(8, "bigint"),
            Self::Timestamp => fixed(8, "timestamp"),
            Self::Double => fixed(8, "double"),
            Self::Int => fixed(4, "int"),
            Self::Boolean => fixed(1, "boolean"),
            Self::Uuid => fixed(16, "uuid"),
            Self::Text => std::str::from_utf8(b)
                .map(|_| ())
                .map_err(|_| "String didn't validate.".to_string()),
            Self::Ascii => {
                if b.is_ascii() {
                    Ok(())
                } else {
                    Err("Invalid byte for ascii".into())
                }
            }
            Self::Decimal => {
                if b.is_empty() || b.len() >= 5 {
                    Ok(())
                } else {
                    Err(format!("Invalid decimal value of {} bytes", b.len()))
                }
            }
            Self::Inet => match b.len() {
                0 | 4 | 16 => Ok(()),
                n => Err(format!("Invalid inet value of {n} bytes")),
            },
            Self::Blob | Self::List(_) | Self::Set(_) | Self::Map(..) => Ok(()),
        }
    }

    /// Serializes a literal written in the statement text as a value of this type.
    pub(crate) fn literal(&self, lit: &Literal) -> Result<Option<Vec<u8>>, String> {
        let mismatch = || {
            Err(format!(
                "Invalid literal {lit:?} for a value of type {}",
                self.cql_name()
            ))
        };
        let v = match (self, lit) {
            (_, Literal::Null) => return Ok(None),
            (Self::Text | Self::Ascii, Literal::Str(s)) => s.as_bytes().to_vec(),
            (Self::Bigint | Self::Timestamp, Literal::Number(n)) => match n.parse::<i64>() {
                Ok(v) => v.to_be_bytes().to_vec(),
                Err(_) => return mismatch(),
            },
            (Self::Int, Literal::Number(n)) => match n.parse::<i32>() {
                Ok(v) => v.to_be_bytes().to_vec(),
                Err(_) => return mismatch(),
            },
            (Self::Double, Literal::Number(n)) => match n.parse::<f64>() {
                Ok(v) => v.to_be_bytes().to_vec(),
                Err(_) => return mismatch(),
            },
            (Self::Decimal, Literal::Number(n)) => match decimal_from_str(n) {
                Some(v) => v,
                None => return mismatch(),
            },
            (Self::Boolean, Literal::Bool(b)) => vec![u8::from(*b)],
            (Self::Blob, Literal::Hex(h)) => h.clone(),
            (Self::Inet, Literal::Str(s)) => match s.parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => a.octets().to_vec(),
                Ok(IpAddr::V6(a)) => a.octets().to_vec(),
                Err(_) => return mismatch(),
            },
            _ => return mismatch(),
        };
        Ok(Some(v))
    }

    /// Whether the double can order clustering keys of this type.
    pub(crate) fn orderable(&self) -> bool {
        matches!(
            self,
            Self::Ascii
                | Self::Text
                | Self::Bigint
                | Self::Int
                | Self::Double
                | Self::Boolean
                | Self::Timestamp
                | Self::Blob
                | Self::Inet
        )
    }

    /// Appends an order-preserving encoding of `b` (byte order equals Cassandra's
    /// comparator order for this type) to `out`; `desc` inverts the order.
    pub(crate) fn encode_ordered(&self, b: &[u8], desc: bool, out: &mut Vec<u8>) {
        let start = out.len();
        // Cassandra sorts the empty value before every other value of any type.
        if b.is_empty() {
            out.push(0);
        } else {
            out.push(1);
        }
        match self {
            _ if b.is_empty() => {}
            Self::Bigint | Self::Timestamp | Self::Int => {
                // Flipping the sign bit makes two's complement sort as unsigned bytes.
                out.push(b[0] ^ 0x80);
                out.extend_from_slice(&b[1..]);
            }
            Self::Double if b.len() == 8 => {
                // Double.compare order: negative values inverted, positive ones sign-flipped.
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                let bits = u64::from_be_bytes(a);
                let key = if bits >> 63 == 1 {
                    !bits
                } else {
                    bits ^ (1 << 63)
                };
                out.extend_from_slice(&key.to_be_bytes());
            }
            _ => {
                // Variable-length: escape 0x00 as 0x00 0xFF and terminate with 0x00 0x00, so a
                // prefix sorts before its extensions and components stay self-delimiting.
                for &x in b {
                    out.push(x);
                    if x == 0 {
                        out.push(0xFF);
                    }
                }
                out.extend_from_slice(&[0, 0]);
            }
        }
        if desc {
            for x in &mut out[start..] {
                *x = !*x;
            }
        }
    }
}

/// Serializes a decimal literal such as `-12.345` or `1e3` as `[int scale][varint]`.
fn decimal_from_str(s: &str) -> Option<Vec<u8>> {
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    let digits = format!("{int_part}{frac_part}");
    let unscaled: i128 = digits.parse().ok()?;
    let scale = i32::try_from(frac_part.len()).ok()?.checked_sub(exp)?;
    let mut out = scale.to_be_bytes().to_vec();
    out.extend_from_slice(&varint_bytes(unscaled));
    Some(out)
}

/// Minimal big-endian two's complement encoding of `v` (Java `BigInteger.toByteArray`).
fn varint_bytes(v: i128) -> Vec<u8> {
    let full = v.to_be_bytes();
    let mut i = 0;
    while i < full.len() - 1 {
        let redundant = (full[i] == 0 && full[i + 1] & 0x80 == 0)
            || (full[i] == 0xFF && full[i + 1] & 0x80 != 0);
        if !redundant {
            break;
        }
        i += 1;
    }
    full[i..].to_vec()
}

/// Serializes a `set<text>` / `list<text>` value.
pub(crate) fn text_collection(items: &[&str]) -> Vec<u8> {
    let mut out = (items.len() as i32).to_be_bytes().to_vec();
    for s in items {
        out.extend_from_slice(&(s.len() as i32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out
}

/// Serializes a `map<text, text>` value.
pub(crate) fn text_map(items: &[(String, String)]) -> Vec<u8> {
    let mut out = (items.len() as i32).to_be_bytes().to_vec();
    for (k, v) in items {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as i32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// Serializes an IP address as an `inet` value.
pub(crate) fn inet_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Splits a serialized `list<T>` into its element values.
pub(crate) fn list_elements(b: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let bad = || "Invalid serialized list".to_string();
    let mut r = super::frame::Reader::new(b);
    let n = r.i32().map_err(|_| bad())?;
    let mut out = Vec::new();
    for _ in 0..n.max(0) {
        match r.bytes().map_err(|_| bad())? {
            Some(v) => out.push(v),
            None => return Err("null is not supported inside an IN list".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(t: &CqlType, b: &[u8], desc: bool) -> Vec<u8> {
        let mut v = Vec::new();
        t.encode_ordered(b, desc, &mut v);
        v
    }

    #[test]
    fn ordered_encoding_sorts_like_cassandra() {
        let t = CqlType::Bigint;
        let vals: Vec<i64> = vec![i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        let encs: Vec<_> = vals
            .iter()
            .map(|v| enc(&t, &v.to_be_bytes(), false))
            .collect();
        assert!(encs.windows(2).all(|w| w[0] < w[1]));
        let d = CqlType::Double;
        let vals = [f64::NEG_INFINITY, -2.5, -0.0, 0.0, 1e-9, 3.0, f64::INFINITY];
        let encs: Vec<_> = vals
            .iter()
            .map(|v| enc(&d, &v.to_be_bytes(), false))
            .collect();
        assert!(encs.windows(2).all(|w| w[0] < w[1]));
        let s = CqlType::Text;
        let vals = ["", "a", "a\0", "ab", "b"];
        let encs: Vec<_> = vals.iter().map(|v| enc(&s, v.as_bytes(), false)).collect();
        assert!(encs.windows(2).all(|w| w[0] < w[1]));
        let encs: Vec<_> = vals.iter().map(|v| enc(&s, v.as_bytes(), true)).collect();
        assert!(encs.windows(2).all(|w| w[0] > w[1]));
    }

    #[test]
    fn decimal_literals() {
        assert_eq!(decimal_from_str("1.25").unwrap(), vec![0, 0, 0, 2, 125]);
        assert_eq!(decimal_from_str("-1").unwrap(), vec![0, 0, 0, 0, 0xFF]);
        assert_eq!(decimal_from_str("128").unwrap(), vec![0, 0, 0, 0, 0, 128]);
    }
}
