//! Names and kept strings: each distinct name is allocated once per read.
//!
//! Input: strings borrowed from the trace. Output: interned [`Name`]s (shared by all
//! blocks through [`SharedNames`], cached per block by [`Interner`] without an
//! allocation per event) and owned strings as the model keeps them ([`kept`],
//! [`raw_box`]): cleaned by [`text::clean`] (control characters escaped, cut at the
//! string cap), with what cleaning changed counted per event.

use crate::model::{CounterSeverity, ImportCounters, Name};
use crate::text;
use rustc_hash::FxBuildHasher;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// [`text::clean`] leaves it (control characters escaped, cut at the string cap).
#[derive(Default)]
pub(super) struct SharedNames(Mutex<NameSet>);

#[derive(Default)]
struct NameSet {
    /// Names kept as written.
    clean: HashSet<Name, FxBuildHasher>,
    /// Names [`text::clean`] changed, by what the trace wrote, with what it changed.
    changed: HashMap<Box<str>, (Name, text::Cleaned), FxBuildHasher>,
}

impl SharedNames {
    fn get(&self, s: &str) -> (Name, text::Cleaned) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = set.clean.get(s) {
            return (n.clone(), text::Cleaned::default());
        }
        if let Some(n) = set.changed.get(s) {
            return n.clone();
        }
        let (c, what) = text::clean(s);
        let n: Name = Arc::from(&*c);
        if c == s {
            set.clean.insert(n.clone());
        } else if !what.cut {
            // Keyed by what the trace wrote; a string over the cap is not kept as a key
            // (that would copy all of it): it is cleaned again when seen again.
            set.changed.insert(Box::from(s), (n.clone(), what));
        }
        (n, what)
    }
}

/// Count what [`text::clean`] changed in one string (per event, so the counts do not
/// depend on how the events were cut into blocks).
fn count_cleaned(what: text::Cleaned, counters: &mut ImportCounters) {
    if what.escaped {
        counters.add(ESCAPED.0, CounterSeverity::Info, ESCAPED.1, 1);
    }
    if what.cut {
        counters.add(LONG.0, CounterSeverity::DataLoss, LONG.1, 1);
    }
}

/// Counter for strings holding control or bidirectional characters.
const ESCAPED: (&str, &str) = (
    "escaped_string",
    "names holding control characters or bidirectional overrides; kept with those written as \\u{..}",
);
/// Counter for strings over the length cap.
const LONG: (&str, &str) = ("long_string", "strings longer than 64 KiB; cut (with …)");

/// A string from the trace as the model keeps it ([`text::clean`]), counted when changed.
pub(super) fn kept(s: &str, counters: &mut ImportCounters) -> String {
    let (c, what) = text::clean(s);
    count_cleaned(what, counters);
    c.into_owned()
}

/// A block's name cache, keyed by the bytes in the trace (no allocation per event);
/// misses go to the shared set.
pub(super) struct Interner<'a, 's> {
    local: HashMap<&'a str, (Name, text::Cleaned), FxBuildHasher>,
    shared: &'s SharedNames,
}

impl<'a, 's> Interner<'a, 's> {
    pub(super) fn new(shared: &'s SharedNames) -> Self {
        Interner {
            local: HashMap::default(),
            shared,
        }
    }

    /// The interned name; what cleaning changed is counted in `counters`.
    pub(super) fn get(&mut self, s: &Option<Cow<'a, str>>, counters: &mut ImportCounters) -> Name {
        let (n, what) = match s {
            Some(Cow::Borrowed(b)) => match self.local.get(b) {
                Some(hit) => hit.clone(),
                None => {
                    let hit = self.shared.get(b);
                    self.local.insert(b, hit.clone());
                    hit
                }
            },
            Some(Cow::Owned(o)) => self.shared.get(o),
            None => return self.get(&Some(Cow::Borrowed("")), counters),
        };
        if what != text::Cleaned::default() {
            count_cleaned(what, counters);
        }
        n
    }
}

/// A raw JSON value (`Input Dims` and the like) as kept: cut at the string cap (a cut
/// value no longer parses, which its readers tolerate). Raw JSON holds no control
/// characters but the whitespace between tokens (inside strings they are escaped), so
/// nothing else is rewritten here.
pub(super) fn raw_box(r: Option<&str>, counters: &mut ImportCounters) -> Option<Box<str>> {
    r.map(|r| {
        if r.len() <= text::MAX_STRING_BYTES {
            Box::from(r)
        } else {
            count_cleaned(
                text::Cleaned {
                    escaped: false,
                    cut: true,
                },
                counters,
            );
            let mut end = text::MAX_STRING_BYTES;
            while !r.is_char_boundary(end) {
                end -= 1;
            }
            Box::from(&r[..end])
        }
    })
}

// ---------------------------------------------------------------------------------
// Cutting the event array into blocks, parsed in parallel
