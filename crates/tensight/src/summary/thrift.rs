//! Thrift's compact protocol, the little of it Parquet's metadata needs: a writer of
//! structs, lists, integers and binaries, and a reader into a small value tree that
//! skips nothing it does not understand (unknown fields are kept, then ignored).
//!
//! Input/output: bytes ⇄ [`Value`]. No Parquet knowledge here: [`super::parquet`] says
//! which field id is what.

/// Compact type ids.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// A decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any integer (i8 to i64) or boolean (0/1).
    Int(i64),
    /// A double.
    Double(f64),
    /// A binary or string.
    Bin(Vec<u8>),
    /// A list or set.
    List(Vec<Value>),
    /// A struct: (field id, value).
    Struct(Vec<(i16, Value)>),
    /// A map (kept only to be skipped).
    Map,
}

impl Value {
    /// Field `id` of a struct.
    pub fn field(&self, id: i16) -> Option<&Value> {
        match self {
            Value::Struct(f) => f.iter().find(|(i, _)| *i == id).map(|(_, v)| v),
            _ => None,
        }
    }
    /// As an integer.
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
    /// As a list.
    pub fn list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) => Some(v),
            _ => None,
        }
    }
    /// As UTF-8 text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Value::Bin(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

/// Writes one struct (nested structs through [`Writer::strukt`]).
#[derive(Default)]
pub struct Writer {
    /// The bytes so far.
    pub out: Vec<u8>,
    last: Vec<i16>,
}

impl Writer {
    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.out.push(b);
                return;
            }
            self.out.push(b | 0x80);
        }
    }
    fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }
    fn header(&mut self, id: i16, ty: u8) {
        let last = self.last.last().copied().unwrap_or(0);
        let delta = id - last;
        if (1..=15).contains(&delta) {
            self.out.push(((delta as u8) << 4) | ty);
        } else {
            self.out.push(ty);
            self.zigzag(id as i64);
        }
        if let Some(l) = self.last.last_mut() {
            *l = id;
        }
    }
    /// Begin the outermost struct.
    pub fn begin(&mut self) {
        self.last.push(0);
    }
    /// End the current struct.
    pub fn end(&mut self) {
        self.out.push(0);
        self.last.pop();
    }
    /// An i32 field.
    pub fn i32(&mut self, id: i16, v: i32) {
        self.header(id, I32);
        self.zigzag(v as i64);
    }
    /// An i64 field.
    pub fn i64(&mut self, id: i16, v: i64) {
        self.header(id, I64);
        self.zigzag(v);
    }
    /// A binary (string) field.
    pub fn bin(&mut self, id: i16, v: &[u8]) {
        self.header(id, BINARY);
        self.varint(v.len() as u64);
        self.out.extend_from_slice(v);
    }
    /// A nested struct field, written by `f`.
    pub fn strukt(&mut self, id: i16, f: impl FnOnce(&mut Writer)) {
        self.header(id, STRUCT);
        self.begin();
        f(self);
        self.end();
    }
    fn list_header(&mut self, id: i16, n: usize, ty: u8) {
        self.header(id, LIST);
        if n < 15 {
            self.out.push(((n as u8) << 4) | ty);
        } else {
            self.out.push(0xf0 | ty);
            self.varint(n as u64);
        }
    }
    /// A list of i32.
    pub fn i32_list(&mut self, id: i16, v: &[i32]) {
        self.list_header(id, v.len(), I32);
        for &x in v {
            self.zigzag(x as i64);
        }
    }
    /// A list of binaries.
    pub fn bin_list(&mut self, id: i16, v: &[&[u8]]) {
        self.list_header(id, v.len(), BINARY);
        for x in v {
            self.varint(x.len() as u64);
            self.out.extend_from_slice(x);
        }
    }
    /// A list of structs, each written by `f`.
    pub fn struct_list<T>(&mut self, id: i16, items: &[T], mut f: impl FnMut(&mut Writer, &T)) {
        self.list_header(id, items.len(), STRUCT);
        for it in items {
            self.begin();
            f(self, it);
            self.end();
        }
    }
}

/// Reads compact-protocol values from `b` at `pos`.
pub struct Reader<'a> {
    b: &'a [u8],
    /// Current offset.
    pub pos: usize,
}

/// Deepest nesting read (Parquet's metadata is 4 deep).
const MAX_DEPTH: u32 = 32;

impl<'a> Reader<'a> {
    /// A reader of `b` from `pos`.
    pub fn new(b: &'a [u8], pos: usize) -> Self {
        Reader { b, pos }
    }
    fn byte(&mut self) -> Result<u8, String> {
        let v = *self.b.get(self.pos).ok_or("metadata ends early")?;
        self.pos += 1;
        Ok(v)
    }
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }
    fn value(&mut self, ty: u8, depth: u32) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("metadata nested too deep".into());
        }
        Ok(match ty {
            BOOL_TRUE => Value::Int(1),
            BOOL_FALSE => Value::Int(0),
            BYTE => Value::Int(self.byte()? as i8 as i64),
            I16 | I32 | I64 => Value::Int(self.zigzag()?),
            DOUBLE => {
                let end = self.pos + 8;
                let s = self.b.get(self.pos..end).ok_or("metadata ends early")?;
                self.pos = end;
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                Value::Double(f64::from_le_bytes(a))
            }
            BINARY => {
                let n = usize::try_from(self.varint()?).map_err(|_| "binary too long")?;
                let end = self.pos.checked_add(n).ok_or("binary too long")?;
                let s = self.b.get(self.pos..end).ok_or("metadata ends early")?;
                self.pos = end;
                Value::Bin(s.to_vec())
            }
            LIST | SET => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => usize::try_from(self.varint()?).map_err(|_| "list too long")?,
                    n => n as usize,
                };
                if n > self.b.len() {
                    return Err("list longer than the file".into());
                }
                let et = h & 0x0f;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    // Booleans in a list are one byte each.
                    v.push(if et == BOOL_TRUE || et == BOOL_FALSE {
                        Value::Int((self.byte()? == BOOL_TRUE) as i64)
                    } else {
                        self.value(et, depth + 1)?
                    });
                }
                Value::List(v)
            }
            MAP => {
                let n = usize::try_from(self.varint()?).map_err(|_| "map too long")?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.value(kv >> 4, depth + 1)?;
                        self.value(kv & 0x0f, depth + 1)?;
                    }
                }
                Value::Map
            }
            STRUCT => self.strukt(depth + 1)?,
            t => return Err(format!("unknown thrift type {t}")),
        })
    }
    /// A struct (the reader at its first field header).
    pub fn strukt(&mut self, depth: u32) -> Result<Value, String> {
        let mut fields = Vec::new();
        let mut last: i16 = 0;
        loop {
            let h = self.byte()?;
            if h == 0 {
                return Ok(Value::Struct(fields));
            }
            let ty = h & 0x0f;
            let id = match h >> 4 {
                0 => i16::try_from(self.zigzag()?).map_err(|_| "field id out of range")?,
                d => last.checked_add(d as i16).ok_or("field id out of range")?,
            };
            last = id;
            fields.push((id, self.value(ty, depth)?));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_survive_the_round_trip() {
        let mut w = Writer::default();
        w.begin();
        w.i32(1, -7);
        w.i64(3, 1 << 40);
        w.bin(20, b"hi");
        w.strukt(21, |w| w.i32(1, 5));
        w.i32_list(22, &[0, 3]);
        w.struct_list(23, &[1i64, 2], |w, &x| w.i64(1, x));
        w.end();
        let v = Reader::new(&w.out, 0).strukt(0).expect("read");
        assert_eq!(v.field(1).and_then(Value::int), Some(-7));
        assert_eq!(v.field(3).and_then(Value::int), Some(1 << 40));
        assert_eq!(v.field(20).and_then(Value::text), Some("hi"));
        assert_eq!(
            v.field(21).and_then(|s| s.field(1)).and_then(Value::int),
            Some(5)
        );
        assert_eq!(
            v.field(22).and_then(Value::list).map(<[Value]>::len),
            Some(2)
        );
        let l = v.field(23).and_then(Value::list).expect("list");
        assert_eq!(l[1].field(1).and_then(Value::int), Some(2));
    }

    #[test]
    fn truncated_input_is_an_error() {
        let mut w = Writer::default();
        w.begin();
        w.bin(1, b"hello");
        w.end();
        for cut in 0..w.out.len() {
            assert!(Reader::new(&w.out[..cut], 0).strukt(0).is_err());
        }
    }
}
