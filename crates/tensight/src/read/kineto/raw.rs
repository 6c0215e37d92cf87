//! The raw (borrowed) event types the parsers fill, and their number conversions.
//!
//! Input: the JSON of one event, through serde or [`super::event_parser`]. Output: a
//! [`RawEvent`] borrowing its strings from the trace, holding only the fields diagnosis
//! needs; times as exact integer nanoseconds ([`Micros`]), other numbers as [`Num`]
//! (a JSON number or a numeric string), pids and tids as [`Id`]. Nothing here knows
//! the model: [`super::to_model`] maps these to it.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// A number that may be written as a JSON number or a numeric string.
#[derive(Clone, Copy, Debug)]
pub(super) struct Num(pub(super) f64);

/// A pid/tid: a number, or a label (Kineto writes "Spans", "Traces", ROCm "0x0").
#[derive(Clone, Copy, Debug)]
pub(super) enum Id {
    Int(i64),
    Label,
}

pub(super) struct NumVisitor;
impl Visitor<'_> for NumVisitor {
    type Value = Option<f64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let t = v.trim();
        if let Some(h) = t.strip_prefix("0x") {
            return Ok(i64::from_str_radix(h, 16).ok().map(|x| x as f64));
        }
        Ok(t.parse::<f64>().ok())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v as i64 as f64))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A time as Kineto writes it (microseconds, often with a 3-digit fraction), kept as
/// exact integer nanoseconds: the decimal text is converted digit by digit, since an
/// f64 of an epoch timestamp in µs (~1.7e15) is off by up to ~128 ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Micros(pub(super) Option<i64>);

impl Micros {
    /// From the JSON text of a number (or a quoted number).
    pub(super) fn from_text(text: &str) -> Micros {
        let t = text.trim().trim_matches('"').trim();
        Micros(decimal_us_to_ns(t))
    }
    pub(super) fn get(self) -> Option<i64> {
        self.0
    }
}

/// `"1712195495519689.125"` µs → 1712195495519689125 ns, exactly (half-up rounding
/// past the third decimal); exponents and other spellings go through f64.
pub(super) fn decimal_us_to_ns(t: &str) -> Option<i64> {
    if let Some(ns) = plain_us_to_ns(t.as_bytes()) {
        return Some(ns);
    }
    let v: f64 = t.parse().ok()?;
    v.is_finite().then(|| (v * 1000.0).round() as i64)
}

/// The exact conversion of a plain number (`-?digits(.digits)?`, at most 16 integer
/// digits), straight from its bytes; `None` for anything else (the caller then takes
/// the general path through f64).
#[inline]
pub(super) fn plain_us_to_ns(b: &[u8]) -> Option<i64> {
    let (neg, b) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let mut i = 0;
    let mut int: i64 = 0;
    while let Some(&c @ b'0'..=b'9') = b.get(i) {
        if i == 16 {
            return None;
        }
        int = int * 10 + (c - b'0') as i64;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut ns = int.checked_mul(1000)?;
    if i < b.len() {
        if b[i] != b'.' {
            return None;
        }
        let fb = &b[i + 1..];
        if !fb.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut scale = 100;
        for k in 0..3 {
            if let Some(&d) = fb.get(k) {
                ns += (d - b'0') as i64 * scale;
            }
            scale /= 10;
        }
        if fb.get(3).is_some_and(|&d| d >= b'5') {
            ns += 1;
        }
    }
    Some(if neg { -ns } else { ns })
}

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        Ok(match raw.get() {
            "null" | "true" | "false" => Micros(None),
            t => Micros::from_text(t),
        })
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(NumVisitor)? {
            Some(v) => Ok(Num(v)),
            None => Ok(Num(f64::NAN)),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id::Int(v as i64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id::Int(v as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(v.trim().parse::<i64>().map(Id::Int).unwrap_or(Id::Label))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Id, E> {
                Ok(Id::Label)
            }
        }
        d.deserialize_any(V)
    }
}

impl Num {
    pub(super) fn get(self) -> Option<f64> {
        self.0.is_finite().then_some(self.0)
    }
    pub(super) fn int(self) -> Option<i64> {
        self.get().map(|v| v as i64)
    }
}

#[derive(Deserialize, Default, Debug)]
pub(super) struct RawEvent<'a> {
    #[serde(borrow, default)]
    pub(super) ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) pid: Option<Id>,
    #[serde(default)]
    pub(super) tid: Option<Id>,
    #[serde(default)]
    pub(super) ts: Option<Micros>,
    #[serde(default)]
    pub(super) dur: Option<Micros>,
    #[serde(borrow, default)]
    pub(super) args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default, Debug)]
pub(super) struct RawArgs<'a> {
    #[serde(rename = "External id", default)]
    pub(super) external_id: Option<Num>,
    #[serde(default)]
    pub(super) correlation: Option<Num>,
    #[serde(rename = "Record function id", default)]
    pub(super) rf_id: Option<Num>,
    #[serde(rename = "Sequence number", default)]
    pub(super) seq: Option<Num>,
    #[serde(default)]
    pub(super) device: Option<Num>,
    #[serde(default)]
    pub(super) stream: Option<Num>,
    #[serde(default)]
    pub(super) bytes: Option<Num>,
    #[serde(default)]
    pub(super) size: Option<Num>,
    #[serde(borrow, default)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub(super) grid: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub(super) block: Option<&'a str>,
    #[serde(rename = "registers per thread", default)]
    pub(super) regs: Option<Num>,
    #[serde(rename = "shared memory", default)]
    pub(super) smem: Option<Num>,
    #[serde(rename = "blocks per SM", default)]
    pub(super) blocks_per_sm: Option<Num>,
    #[serde(rename = "warps per SM", default)]
    pub(super) warps_per_sm: Option<Num>,
    #[serde(rename = "est. achieved occupancy %", default)]
    pub(super) occupancy: Option<Num>,
    #[serde(rename = "Input Dims", borrow, default, deserialize_with = "raw_text")]
    pub(super) input_dims: Option<&'a str>,
    #[serde(rename = "Input type", borrow, default, deserialize_with = "raw_text")]
    pub(super) input_types: Option<&'a str>,
    #[serde(
        rename = "Input Strides",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) input_strides: Option<&'a str>,
    #[serde(
        rename = "Concrete Inputs",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) concrete_inputs: Option<&'a str>,
    #[serde(rename = "Call stack", borrow, default)]
    pub(super) call_stack: Option<Cow<'a, str>>,
    #[serde(rename = "Bytes", default)]
    pub(super) mem_bytes: Option<Num>,
    #[serde(rename = "Total Allocated", default)]
    pub(super) total_allocated: Option<Num>,
    #[serde(rename = "Total Reserved", default)]
    pub(super) total_reserved: Option<Num>,
    #[serde(rename = "Device Type", default)]
    pub(super) device_type: Option<Num>,
    #[serde(rename = "Device Id", default)]
    pub(super) device_id: Option<Num>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) labels: Option<Cow<'a, str>>,
    #[serde(
        rename = "Collective name",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) collective: Option<&'a str>,
    #[serde(rename = "In msg nelems", default)]
    pub(super) in_nelems: Option<Num>,
    #[serde(rename = "Out msg nelems", default)]
    pub(super) out_nelems: Option<Num>,
    #[serde(rename = "Group size", default)]
    pub(super) group_size: Option<Num>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub(super) dtype: Option<&'a str>,
    #[serde(
        rename = "Process Group Name",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) pg_name: Option<&'a str>,
}

/// `RawValue` fields kept as their raw text.
fn raw_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de str>, D::Error> {
    Ok(Option::<&'de RawValue>::deserialize(d)?.map(RawValue::get))
}

#[cfg(test)]
mod tests {
    use super::decimal_us_to_ns;

    #[test]
    fn exact_nanoseconds() {
        assert_eq!(
            decimal_us_to_ns("1712195495519689.125"),
            Some(1_712_195_495_519_689_125)
        );
        assert_eq!(
            decimal_us_to_ns("1661938466265032"),
            Some(1_661_938_466_265_032_000)
        );
        assert_eq!(
            decimal_us_to_ns("5089384261670.117"),
            Some(5_089_384_261_670_117)
        );
        assert_eq!(decimal_us_to_ns("0.7675"), Some(768));
        assert_eq!(decimal_us_to_ns("12.3"), Some(12_300));
        assert_eq!(decimal_us_to_ns("-3.5"), Some(-3_500));
        assert_eq!(decimal_us_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(decimal_us_to_ns("x"), None);
        assert_eq!(decimal_us_to_ns(""), None);
    }
}
