//! A small Parquet codec: one flat table of optional INT64, DOUBLE and UTF-8 columns.
//!
//! Writes: one row group, one v1 data page per column, PLAIN values, RLE definition
//! levels, no compression, file key-value metadata. Reads: what it writes and any file
//! of that shape (several row groups and pages, RLE or bit-packed definition levels,
//! required or optional columns); dictionary pages, compression, nested or repeated
//! columns and other physical types are refused with a reason. Written by hand because
//! the `parquet` crate's build is too heavy for this project (docs/distributed.md).

use super::thrift::{Reader, Value, Writer};

/// A column's values (`None`: null).
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// INT64.
    I64(Vec<Option<i64>>),
    /// DOUBLE.
    F64(Vec<Option<f64>>),
    /// BYTE_ARRAY annotated UTF8.
    Str(Vec<Option<String>>),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::I64(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::Str(v) => v.len(),
        }
    }
    fn present(&self, i: usize) -> bool {
        match self {
            Data::I64(v) => v[i].is_some(),
            Data::F64(v) => v[i].is_some(),
            Data::Str(v) => v[i].is_some(),
        }
    }
    /// Parquet physical type.
    fn physical(&self) -> i32 {
        match self {
            Data::I64(_) => 2,
            Data::F64(_) => 5,
            Data::Str(_) => 6,
        }
    }
    fn plain(&self, out: &mut Vec<u8>) {
        match self {
            Data::I64(v) => v.iter().flatten().for_each(|x| out.extend(x.to_le_bytes())),
            Data::F64(v) => v.iter().flatten().for_each(|x| out.extend(x.to_le_bytes())),
            Data::Str(v) => v.iter().flatten().for_each(|s| {
                out.extend((s.len() as u32).to_le_bytes());
                out.extend(s.as_bytes());
            }),
        }
    }
}

/// A named column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Name.
    pub name: String,
    /// Values.
    pub data: Data,
}

const MAGIC: &[u8; 4] = b"PAR1";

/// Definition levels (0 null, 1 present) as RLE runs of the hybrid encoding, bit width 1.
fn def_levels(d: &Data) -> Vec<u8> {
    let mut out = Vec::new();
    let n = d.len();
    let mut i = 0;
    while i < n {
        let p = d.present(i);
        let mut j = i;
        while j < n && d.present(j) == p {
            j += 1;
        }
        let mut run = ((j - i) as u64) << 1;
        loop {
            let b = (run & 0x7f) as u8;
            run >>= 7;
            if run == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.push(p as u8);
        i = j;
    }
    out
}

/// The table as a Parquet file with key-value metadata `kv`.
pub fn write(cols: &[Column], kv: &[(String, String)]) -> Vec<u8> {
    let rows = cols.first().map_or(0, |c| c.data.len());
    let mut out = MAGIC.to_vec();
    let mut chunks = Vec::with_capacity(cols.len());
    for c in cols {
        let mut page = Vec::new();
        let levels = def_levels(&c.data);
        page.extend((levels.len() as u32).to_le_bytes());
        page.extend(levels);
        c.data.plain(&mut page);
        let mut h = Writer::default();
        h.begin();
        h.i32(1, 0); // DATA_PAGE
        h.i32(2, page.len() as i32);
        h.i32(3, page.len() as i32);
        h.strukt(5, |w| {
            w.i32(1, rows as i32);
            w.i32(2, 0); // PLAIN
            w.i32(3, 3); // RLE
            w.i32(4, 3);
        });
        h.end();
        let offset = out.len() as i64;
        let size = (h.out.len() + page.len()) as i64;
        out.extend(&h.out);
        out.extend(&page);
        chunks.push((c, offset, size));
    }
    let mut m = Writer::default();
    m.begin();
    m.i32(1, 1);
    let mut schema: Vec<Option<&Column>> = vec![None];
    schema.extend(cols.iter().map(Some));
    m.struct_list(2, &schema, |w, c| match c {
        None => {
            w.bin(4, b"schema");
            w.i32(5, cols.len() as i32);
        }
        Some(c) => {
            w.i32(1, c.data.physical());
            w.i32(3, 1); // OPTIONAL
            w.bin(4, c.name.as_bytes());
            if matches!(c.data, Data::Str(_)) {
                w.i32(6, 0); // UTF8
            }
        }
    });
    m.i64(3, rows as i64);
    let total: i64 = chunks.iter().map(|c| c.2).sum();
    m.struct_list(4, &[()], |w, _| {
        w.struct_list(1, &chunks, |w, (c, offset, size)| {
            w.i64(2, *offset);
            w.strukt(3, |w| {
                w.i32(1, c.data.physical());
                w.i32_list(2, &[0, 3]);
                w.bin_list(3, &[c.name.as_bytes()]);
                w.i32(4, 0); // UNCOMPRESSED
                w.i64(5, rows as i64);
                w.i64(6, *size);
                w.i64(7, *size);
                w.i64(9, *offset);
            });
        });
        w.i64(2, total);
        w.i64(3, rows as i64);
    });
    m.struct_list(5, kv, |w, (k, v)| {
        w.bin(1, k.as_bytes());
        w.bin(2, v.as_bytes());
    });
    m.bin(
        6,
        concat!("tensight ", env!("CARGO_PKG_VERSION")).as_bytes(),
    );
    m.end();
    out.extend(&m.out);
    out.extend((m.out.len() as u32).to_le_bytes());
    out.extend(MAGIC);
    out
}

/// The footer's metadata of the Parquet file `b`.
fn footer(b: &[u8]) -> Result<Value, String> {
    if b.len() < 12 || !b.starts_with(MAGIC) || !b.ends_with(MAGIC) {
        return Err("not a Parquet file (no PAR1 at both ends)".into());
    }
    let n = u32::from_le_bytes([
        b[b.len() - 8],
        b[b.len() - 7],
        b[b.len() - 6],
        b[b.len() - 5],
    ]);
    let start = (b.len() - 8)
        .checked_sub(n as usize)
        .filter(|&s| s >= 4)
        .ok_or("the footer's length is past the file")?;
    Reader::new(&b[..b.len() - 8], start).strukt(0)
}

/// A file's columns and key-value metadata.
pub type Table = (Vec<Column>, Vec<(String, String)>);

/// Read the table and key-value metadata of the Parquet file `b`.
pub fn read(b: &[u8]) -> Result<Table, String> {
    let meta = footer(b)?;
    let kv = meta
        .field(5)
        .and_then(Value::list)
        .unwrap_or(&[])
        .iter()
        .filter_map(|e| {
            let k = e.field(1)?.text()?.to_string();
            Some((
                k,
                e.field(2).and_then(Value::text).unwrap_or("").to_string(),
            ))
        })
        .collect();
    let schema = meta.field(2).and_then(Value::list).ok_or("no schema")?;
    let mut cols: Vec<(Column, bool)> = Vec::new();
    for e in schema.iter().skip(1) {
        if e.field(5).is_some() {
            return Err("nested columns are not read".into());
        }
        let name = e
            .field(4)
            .and_then(Value::text)
            .ok_or("a column without a name")?;
        let data = match e.field(1).and_then(Value::int) {
            Some(2) => Data::I64(Vec::new()),
            Some(5) => Data::F64(Vec::new()),
            Some(6) => Data::Str(Vec::new()),
            t => return Err(format!("column {name}: physical type {t:?} is not read")),
        };
        let optional = match e.field(3).and_then(Value::int) {
            Some(0) => false,
            Some(1) => true,
            _ => return Err(format!("column {name}: repeated columns are not read")),
        };
        cols.push((
            Column {
                name: name.to_string(),
                data,
            },
            optional,
        ));
    }
    for rg in meta.field(4).and_then(Value::list).unwrap_or(&[]) {
        let chunks = rg
            .field(1)
            .and_then(Value::list)
            .ok_or("a row group without columns")?;
        if chunks.len() != cols.len() {
            return Err("a row group's columns do not match the schema".into());
        }
        for (cc, (col, optional)) in chunks.iter().zip(cols.iter_mut()) {
            let md = cc.field(3).ok_or("a column chunk without metadata")?;
            if md.field(4).and_then(Value::int) != Some(0) {
                return Err(format!(
                    "column {}: compressed pages are not read",
                    col.name
                ));
            }
            let values = md.field(5).and_then(Value::int).ok_or("no value count")?;
            let start = md
                .field(9)
                .and_then(Value::int)
                .ok_or("no data page offset")?;
            let size = md.field(7).and_then(Value::int).ok_or("no chunk size")?;
            read_chunk(b, start, size, values, *optional, &mut col.data)
                .map_err(|e| format!("column {}: {e}", col.name))?;
        }
    }
    let cols: Vec<Column> = cols.into_iter().map(|(c, _)| c).collect();
    let n = cols.first().map_or(0, |c| c.data.len());
    if cols.iter().any(|c| c.data.len() != n) {
        return Err("columns of different lengths".into());
    }
    Ok((cols, kv))
}

fn usize_of(v: i64, what: &str) -> Result<usize, String> {
    usize::try_from(v).map_err(|_| format!("negative {what}"))
}

fn read_chunk(
    b: &[u8],
    start: i64,
    size: i64,
    values: i64,
    optional: bool,
    out: &mut Data,
) -> Result<(), String> {
    let mut pos = usize_of(start, "offset")?;
    let end = pos
        .checked_add(usize_of(size, "size")?)
        .filter(|&e| e <= b.len())
        .ok_or("chunk past the end of the file")?;
    let mut left = usize_of(values, "value count")?;
    if left > (end - pos).saturating_mul(8) {
        return Err("more values than the chunk has bytes for".into());
    }
    while left > 0 && pos < end {
        let mut r = Reader::new(&b[..end], pos);
        let h = r.strukt(0)?;
        let len = usize_of(
            h.field(3).and_then(Value::int).ok_or("page without size")?,
            "size",
        )?;
        let stop = r.pos.checked_add(len).ok_or("page past its chunk")?;
        let body = b[..end].get(r.pos..stop).ok_or("page past its chunk")?;
        pos = stop;
        match h.field(1).and_then(Value::int) {
            Some(0) => {}
            Some(2) => return Err("dictionary pages are not read".into()),
            t => return Err(format!("page type {t:?} is not read")),
        }
        let dp = h.field(5).ok_or("data page without header")?;
        let n = usize_of(dp.field(1).and_then(Value::int).ok_or("no count")?, "count")?;
        if dp.field(2).and_then(Value::int) != Some(0) {
            return Err("only PLAIN values are read".into());
        }
        page(body, n.min(left), optional, out)?;
        left = left.saturating_sub(n);
    }
    if left > 0 {
        return Err("fewer values than the metadata says".into());
    }
    Ok(())
}

/// Decode one data page of `n` values.
fn page(body: &[u8], n: usize, optional: bool, out: &mut Data) -> Result<(), String> {
    let (present, mut at) = if optional {
        let len = body.get(..4).ok_or("page ends early")?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let lv = body.get(4..4 + len).ok_or("levels past the page")?;
        (levels(lv, n)?, 4 + len)
    } else {
        (vec![true; n], 0)
    };
    let mut take = |k: usize| -> Result<&[u8], String> {
        let s = body.get(at..at + k).ok_or("values past the page")?;
        at += k;
        Ok(s)
    };
    for p in present {
        match out {
            Data::I64(v) => v.push(if p {
                Some(i64::from_le_bytes(
                    take(8)?.try_into().map_err(|_| "short")?,
                ))
            } else {
                None
            }),
            Data::F64(v) => v.push(if p {
                Some(f64::from_le_bytes(
                    take(8)?.try_into().map_err(|_| "short")?,
                ))
            } else {
                None
            }),
            Data::Str(v) => v.push(if p {
                let l = u32::from_le_bytes(take(4)?.try_into().map_err(|_| "short")?) as usize;
                Some(String::from_utf8(take(l)?.to_vec()).map_err(|_| "text not UTF-8")?)
            } else {
                None
            }),
        }
    }
    Ok(())
}

/// `n` definition levels (bit width 1) of the RLE/bit-packed hybrid in `b`.
fn levels(b: &[u8], n: usize) -> Result<Vec<bool>, String> {
    let mut out = Vec::with_capacity(n);
    let mut pos = 0;
    while out.len() < n {
        let mut h = 0u64;
        let mut shift = 0;
        loop {
            let byte = *b.get(pos).ok_or("levels end early")?;
            pos += 1;
            h |= ((byte & 0x7f) as u64) << shift;
            shift += 7;
            if byte & 0x80 == 0 || shift > 63 {
                break;
            }
        }
        if h & 1 == 0 {
            let count = (h >> 1) as usize;
            let v = *b.get(pos).ok_or("levels end early")? != 0;
            pos += 1;
            out.extend(std::iter::repeat_n(v, count.min(n - out.len())));
        } else {
            let groups = (h >> 1) as usize;
            for g in 0..groups {
                let byte = *b.get(pos + g).ok_or("levels end early")?;
                for bit in 0..8 {
                    if out.len() < n {
                        out.push(byte >> bit & 1 == 1);
                    }
                }
            }
            pos += groups;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_survives_the_round_trip() {
        let cols = vec![
            Column {
                name: "record".into(),
                data: Data::Str(vec![Some("step".into()), Some("cause".into()), None]),
            },
            Column {
                name: "dur_ns".into(),
                data: Data::I64(vec![Some(-5), None, Some(i64::MAX)]),
            },
            Column {
                name: "saving_ms".into(),
                data: Data::F64(vec![None, Some(1.25), None]),
            },
        ];
        let kv = vec![("k".to_string(), "v".to_string())];
        let file = write(&cols, &kv);
        assert_eq!(read(&file), Ok((cols, kv)));
    }

    #[test]
    fn bit_packed_levels_are_read() {
        // One group of 8 levels, bit-packed: 0b1010_0101.
        let l = levels(&[0b11, 0b1010_0101], 8).expect("levels");
        assert_eq!(l, [true, false, true, false, false, true, false, true]);
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        let cols = vec![Column {
            name: "a".into(),
            data: Data::I64(vec![Some(1), Some(2)]),
        }];
        let file = write(&cols, &[]);
        for cut in 0..file.len() {
            let mut f = file[..cut].to_vec();
            f.extend(MAGIC);
            let _ = read(&f);
        }
        for i in 4..file.len() - 4 {
            let mut f = file.clone();
            f[i] ^= 0xff;
            let _ = read(&f);
        }
        assert!(read(b"PAR1PAR1").is_err());
    }
}
