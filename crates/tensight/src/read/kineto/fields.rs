//! Which Kineto key fills which [`RawEvent`] field: the one key table of both event
//! parsers.
//!
//! Input: a member's key and a parser positioned at its value ([`Values`]). Output:
//! the field set (each known key at most once, as serde requires: a repeated one is a
//! [`Fallback`]), or the value skipped. How values are read (bytes one at a time,
//! or tokens of the structural index) is the parsers' business:
//! [`super::event_parser`] and [`super::index_parser`] implement [`Values`].

use super::raw::{Id, Micros, Num, RawArgs, RawEvent};
use std::borrow::Cow;

/// The event needs the general (serde) parser.
#[derive(Debug, PartialEq, Eq)]
pub struct Fallback;

pub(super) type R<T> = Result<T, Fallback>;

/// A parser positioned at a member's value; each method consumes the value whole.
pub(super) trait Values<'a> {
    /// `null` (consumed, true) or anything else (not consumed, false).
    fn null(&mut self) -> R<bool>;
    /// A string without escapes, or null.
    fn opt_str(&mut self) -> R<Option<Cow<'a, str>>>;
    /// A pid/tid: a number, a (numeric) string, or null.
    fn opt_id(&mut self) -> R<Option<Id>>;
    /// A time in µs: a number, a numeric string, or null.
    fn opt_micros(&mut self) -> R<Option<Micros>>;
    /// A number, a numeric string, a boolean, or null.
    fn opt_num(&mut self) -> R<Option<Num>>;
    /// Any value as its raw text, or null.
    fn opt_raw(&mut self) -> R<Option<&'a str>>;
    /// Any value, checked like serde's `IgnoredAny` and dropped.
    fn skip(&mut self) -> R<()>;
    /// The `args` object: each member through [`args_field`].
    fn args(&mut self, a: &mut RawArgs<'a>) -> R<()>;
}

// Field bits for duplicate detection (serde rejects a repeated known field).
const PH: u32 = 1;
const CAT: u32 = 1 << 1;
const NAME: u32 = 1 << 2;
const PID: u32 = 1 << 3;
const TID: u32 = 1 << 4;
const TS: u32 = 1 << 5;
const DUR: u32 = 1 << 6;
const ARGS: u32 = 1 << 7;

#[inline]
fn once(seen: &mut u32, bit: u32) -> R<()> {
    if *seen & bit != 0 {
        return Err(Fallback);
    }
    *seen |= bit;
    Ok(())
}

/// One member of an event object: `key`'s value read by `p` into `ev`.
#[inline]
pub(super) fn event_field<'a, V: Values<'a>>(
    p: &mut V,
    key: &[u8],
    ev: &mut RawEvent<'a>,
    seen: &mut u32,
) -> R<()> {
    match key {
        b"ph" => {
            once(seen, PH)?;
            ev.ph = p.opt_str()?;
        }
        b"cat" => {
            once(seen, CAT)?;
            ev.cat = p.opt_str()?;
        }
        b"name" => {
            once(seen, NAME)?;
            ev.name = p.opt_str()?;
        }
        b"pid" => {
            once(seen, PID)?;
            ev.pid = p.opt_id()?;
        }
        b"tid" => {
            once(seen, TID)?;
            ev.tid = p.opt_id()?;
        }
        b"ts" => {
            once(seen, TS)?;
            ev.ts = p.opt_micros()?;
        }
        b"dur" => {
            once(seen, DUR)?;
            ev.dur = p.opt_micros()?;
        }
        b"args" => {
            once(seen, ARGS)?;
            if p.null()? {
                ev.args = None;
            } else {
                p.args(ev.args.insert(RawArgs::default()))?;
            }
        }
        _ => p.skip()?,
    }
    Ok(())
}

/// One member of an event's `args` object: `key`'s value read by `p` into `a`.
#[inline]
pub(super) fn args_field<'a, V: Values<'a>>(
    p: &mut V,
    key: &[u8],
    a: &mut RawArgs<'a>,
    seen: &mut u64,
) -> R<()> {
    // Field index in RawArgs order, for duplicate detection.
    let mut once = |n: u32| -> R<()> {
        let bit = 1u64 << n;
        if *seen & bit != 0 {
            return Err(Fallback);
        }
        *seen |= bit;
        Ok(())
    };
    macro_rules! num {
        ($n:expr, $f:ident) => {{
            once($n)?;
            a.$f = p.opt_num()?;
        }};
    }
    macro_rules! raw {
        ($n:expr, $f:ident) => {{
            once($n)?;
            a.$f = p.opt_raw()?;
        }};
    }
    macro_rules! text {
        ($n:expr, $f:ident) => {{
            once($n)?;
            a.$f = p.opt_str()?;
        }};
    }
    match key {
        b"External id" => num!(0, external_id),
        b"correlation" => num!(1, correlation),
        b"Record function id" => num!(2, rf_id),
        b"Sequence number" => num!(3, seq),
        b"device" => num!(4, device),
        b"stream" => num!(5, stream),
        b"bytes" => num!(6, bytes),
        b"size" => num!(7, size),
        b"kind" => text!(8, kind),
        b"grid" => raw!(9, grid),
        b"block" => raw!(10, block),
        b"registers per thread" => num!(11, regs),
        b"shared memory" => num!(12, smem),
        b"blocks per SM" => num!(13, blocks_per_sm),
        b"warps per SM" => num!(14, warps_per_sm),
        b"est. achieved occupancy %" => num!(15, occupancy),
        b"Input Dims" => raw!(16, input_dims),
        b"Input type" => raw!(17, input_types),
        b"Input Strides" => raw!(18, input_strides),
        b"Concrete Inputs" => raw!(19, concrete_inputs),
        b"Call stack" => text!(20, call_stack),
        b"Bytes" => num!(21, mem_bytes),
        b"Total Allocated" => num!(22, total_allocated),
        b"Total Reserved" => num!(23, total_reserved),
        b"Device Type" => num!(24, device_type),
        b"Device Id" => num!(25, device_id),
        b"name" => text!(26, name),
        b"labels" => text!(27, labels),
        b"Collective name" => raw!(28, collective),
        b"In msg nelems" => num!(29, in_nelems),
        b"Out msg nelems" => num!(30, out_nelems),
        b"Group size" => num!(31, group_size),
        b"dtype" => raw!(32, dtype),
        b"Process Group Name" => raw!(33, pg_name),
        _ => p.skip()?,
    }
    Ok(())
}
