//! PyTorch execution trace reader (`ExecutionTraceObserver` JSON), linked to the ops
//! of a Kineto trace.
//!
//! Input: the bytes of an execution trace (`{"schema": ..., "nodes": [...]}`, plain or
//! gzip) and a finished [`Profile`]. Output: [`ExecTrace`] in `Profile::execution_trace`:
//! per node its tensor inputs and outputs (`[tensor_id, storage_id, offset, numel,
//! itemsize, device]` with shape, strides and dtype) and the schema's alias
//! annotations, each node linked to the Kineto op with the same record function id
//! (`attrs.rf_id` == `Record function id`) and name.
//!
//! Both layouts read: schema 1.1 (`inputs: {values, shapes, types, strides}`, ids in
//! `attrs`) and the old flat 1.0 (`inputs`, `input_shapes`, `input_types`, ids at the
//! top level, no strides). The top-level object is walked with [`super::scan`], the node
//! array cut into byte ranges and parsed in parallel with serde into borrowed structs;
//! no document tree is built. Nodes that cannot be parsed or linked are counted in the
//! import counters, never an error; a file cut short keeps the nodes before the cut.
//! It does not build the tensor forest or attribute traffic: analyses do that.

use super::scan::{self, Truncated};
use super::{source, Loaded};
use crate::error::{Error, Result};
use crate::model::{
    AliasKind, CounterSeverity, EtNode, EtTensor, ExecTrace, ImportCounters, Name, Profile,
};
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// Nodes per parallel work item.
const CHUNK_NODES: usize = 2048;

/// Counter names and descriptions.
const UNPARSEABLE: (&str, &str) = (
    "et_node_unparseable",
    "execution-trace node that is not a valid node object; skipped",
);
const BAD_TENSOR: (&str, &str) = (
    "et_tensor_unparseable",
    "tensor argument of an execution-trace node whose value is not [tensor_id, storage_id, offset, numel, itemsize, device]; skipped",
);
const UNLINKED: (&str, &str) = (
    "et_node_unlinked",
    "execution-trace node with no Kineto op of the same record function id: its tensors are not attached to an op",
);
const MISMATCH: (&str, &str) = (
    "et_node_name_mismatch",
    "execution-trace node whose record function id names a Kineto op of another name: not linked",
);

/// Read the execution trace at `path`, link it to `loaded`'s ops and store it in the
/// profile (replacing one read before). Warnings go to `loaded.warnings`.
pub fn attach(loaded: &mut Loaded, path: &Path) -> Result<()> {
    let shown = path.display().to_string();
    let (bytes, info) = source::open(path).map_err(|e| Error {
        message: e
            .message
            .replace("failed to read trace", "failed to read execution trace"),
        hint: e.hint,
    })?;
    if let Some(e) = &info.gzip_truncated {
        loaded.warnings.push(format!(
            "the execution trace's gzip stream ends early ({e}): read the {} bytes before the cut",
            bytes.len()
        ));
    }
    link_into(loaded, &shown, &bytes)
}

/// [`attach`] for an execution trace held in memory (plain or gzip JSON).
pub fn attach_bytes(loaded: &mut Loaded, shown: &str, bytes: &[u8]) -> Result<()> {
    match super::gunzipped(&format!("execution trace {shown}"), bytes) {
        Some(out) => link_into(loaded, shown, &out?),
        None => link_into(loaded, shown, bytes),
    }
}

fn link_into(loaded: &mut Loaded, shown: &str, bytes: &[u8]) -> Result<()> {
    let (mut et, counters, mut warnings) = read(shown, bytes)?;
    let p = &mut loaded.profile;
    p.counters.counters.retain(|c| !c.name.starts_with("et_"));
    p.counters.merge(counters);
    link(&mut et, p, &mut warnings);
    p.execution_trace = Some(et);
    loaded.warnings.append(&mut warnings);
    Ok(())
}

/// Parse an execution trace held in memory (plain JSON; decompress gzip first).
/// Returns the unlinked trace, its import counters and warnings.
pub fn read(shown: &str, buf: &[u8]) -> Result<(ExecTrace, ImportCounters, Vec<String>)> {
    let start = scan::skip_ws(buf, 0);
    if buf.get(start) != Some(&b'{') {
        return Err(Error::new(format!(
            "failed to read execution trace {shown}: not a JSON object"
        ))
        .with_hint(
            "pass the execution trace written by torch.profiler.ExecutionTraceObserver (et.json)",
        ));
    }
    let mut schema = String::new();
    let mut keys: Vec<String> = Vec::new();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut saw_nodes = false;
    let mut cut: Option<usize> = None;
    let walked = scan::walk_object(buf, start, |m| {
        let key = String::from_utf8_lossy(m.key).into_owned();
        let r = match key.as_str() {
            "nodes" if buf.get(m.start) == Some(&b'[') => {
                saw_nodes = true;
                Some(scan::array_elements(buf, m.start, &mut ranges))
            }
            "schema" => {
                let end = scan::value_end(buf, m.start);
                if let Ok(end) = end {
                    schema =
                        serde_json::from_slice::<String>(&buf[m.start..end]).unwrap_or_default();
                }
                Some(end)
            }
            _ => None,
        };
        keys.push(key);
        r
    });
    if let Err(Truncated(at)) = walked {
        cut = Some(at);
    }
    if !saw_nodes {
        if keys.iter().any(|k| k == "traceEvents") {
            return Err(Error::new(format!(
                "{shown} is a Kineto trace (timeline), not an execution trace"
            ))
            .with_hint("pass the execution trace (et.json, written by ExecutionTraceObserver) to --et, and the Kineto trace as the path"));
        }
        if let Some(at) = cut {
            return Err(Error::new(format!(
                "failed to read execution trace {shown}: the JSON ends early, at byte {at}, before \"nodes\""
            ))
            .with_hint("the file is incomplete: was the program killed while the trace was written?"));
        }
        let keys: Vec<&str> = keys.iter().take(6).map(String::as_str).collect();
        return Err(Error::new(format!(
            "failed to read execution trace {shown}: JSON but no \"nodes\" (top-level keys: {})",
            if keys.is_empty() {
                "none".to_string()
            } else {
                keys.join(", ")
            }
        ))
        .with_hint("pass the execution trace written by torch.profiler.ExecutionTraceObserver"));
    }
    let mut warnings = Vec::new();
    if let Some(at) = cut {
        warnings.push(format!(
            "the execution trace {shown} ends early (at byte {at}): read the {} nodes before the cut",
            ranges.len()
        ));
    }
    let parts: Vec<(Vec<EtNode>, Tally)> = ranges
        .par_chunks(CHUNK_NODES)
        .map(|chunk| parse_chunk(buf, chunk))
        .collect();
    let mut nodes = Vec::with_capacity(ranges.len());
    let mut tally = Tally::default();
    for (mut n, t) in parts {
        nodes.append(&mut n);
        tally.bad_nodes += t.bad_nodes;
        tally.bad_tensors += t.bad_tensors;
    }
    let mut counters = ImportCounters::default();
    counters.add(
        UNPARSEABLE.0,
        CounterSeverity::DataLoss,
        UNPARSEABLE.1,
        tally.bad_nodes,
    );
    counters.add(
        BAD_TENSOR.0,
        CounterSeverity::DataLoss,
        BAD_TENSOR.1,
        tally.bad_tensors,
    );
    let et = ExecTrace {
        source: shown.to_string(),
        schema,
        nodes,
        linked: 0,
        by_op: Vec::new(),
    };
    Ok((et, counters, warnings))
}

/// Link each node to the op of `profile` with the same record function id and name;
/// counts the rest in the profile's import counters.
pub fn link(et: &mut ExecTrace, profile: &mut Profile, warnings: &mut Vec<String>) {
    let mut by_rf: HashMap<i64, u32> = HashMap::new();
    for (i, op) in profile.ops.iter().enumerate() {
        if let Some(rf) = op.rf_id {
            by_rf.entry(rf).or_insert(i as u32);
        }
    }
    let (mut unlinked, mut mismatched) = (0u64, 0u64);
    et.by_op.clear();
    for (ni, node) in et.nodes.iter_mut().enumerate() {
        node.op = None;
        let hit = node.rf_id.and_then(|rf| by_rf.get(&rf)).copied();
        match hit {
            Some(oi) if profile.ops[oi as usize].name == node.name => {
                node.op = Some(oi);
                et.by_op.push((oi, ni as u32));
            }
            Some(_) => mismatched += 1,
            None => unlinked += 1,
        }
    }
    et.by_op.sort_unstable();
    et.by_op.dedup_by_key(|&mut (o, _)| o);
    et.linked = (et.nodes.len() as u64).saturating_sub(unlinked + mismatched);
    let c = &mut profile.counters;
    c.add(UNLINKED.0, CounterSeverity::DataLoss, UNLINKED.1, unlinked);
    c.add(
        MISMATCH.0,
        CounterSeverity::DataLoss,
        MISMATCH.1,
        mismatched,
    );
    let n = et.nodes.len() as u64;
    if n == 0 {
        return;
    }
    if by_rf.is_empty() {
        warnings.push(format!(
            "the Kineto trace has no Record function ids (recorded by torch older than 2.1?): the {n} execution-trace nodes are not linked to ops"
        ));
    } else if mismatched * 2 > n {
        warnings.push(format!(
            "{mismatched} of {n} execution-trace nodes name another op than the Kineto op of the same record function id: were the two traces recorded by the same run?"
        ));
    } else if et.linked * 2 < n {
        warnings.push(format!(
            "only {} of {n} execution-trace nodes match an op of the Kineto trace: were the two traces recorded over the same window?",
            et.linked
        ));
    }
}

#[derive(Default)]
struct Tally {
    bad_nodes: u64,
    bad_tensors: u64,
}

#[derive(Deserialize)]
struct RawNode<'a> {
    #[serde(default)]
    id: Option<i64>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    ctrl_deps: Option<i64>,
    #[serde(default)]
    parent: Option<i64>,
    #[serde(default)]
    rf_id: Option<i64>,
    #[serde(default)]
    seq_id: Option<i64>,
    #[serde(default)]
    tid: Option<i64>,
    #[serde(borrow, default)]
    op_schema: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    inputs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    outputs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input_shapes: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input_types: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output_shapes: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output_types: Option<&'a RawValue>,
    #[serde(borrow, default)]
    attrs: Option<Vec<RawAttr<'a>>>,
}

#[derive(Deserialize)]
struct RawAttr<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

/// Inputs or outputs in schema 1.1 (`{values, shapes, types, strides}`).
#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(borrow, default)]
    values: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    shapes: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    types: Vec<Cow<'a, str>>,
    #[serde(borrow, default)]
    strides: Vec<&'a RawValue>,
}

/// Interned names of one chunk.
#[derive(Default)]
struct Names(HashMap<String, Name>);

impl Names {
    fn get(&mut self, s: &str) -> Name {
        if let Some(n) = self.0.get(s) {
            return n.clone();
        }
        let n: Name = Name::from(&*crate::text::clean(s).0);
        self.0.insert(s.to_string(), n.clone());
        n
    }
}

fn parse_chunk(buf: &[u8], chunk: &[(usize, usize)]) -> (Vec<EtNode>, Tally) {
    let mut names = Names::default();
    let mut tally = Tally::default();
    let mut out = Vec::with_capacity(chunk.len());
    for &(s, e) in chunk {
        match serde_json::from_slice::<RawNode>(&buf[s..e]) {
            Ok(raw) => {
                if let Some(n) = convert(raw, &mut names, &mut tally) {
                    out.push(n);
                }
            }
            Err(_) => tally.bad_nodes += 1,
        }
    }
    (out, tally)
}

fn int(v: Option<&RawValue>) -> Option<i64> {
    let v = v?;
    serde_json::from_str::<i64>(v.get())
        .ok()
        .or_else(|| serde_json::from_str::<u64>(v.get()).ok().map(|u| u as i64))
}

/// Build a node from its raw form; `None` for the synthetic root nodes.
fn convert(raw: RawNode, names: &mut Names, tally: &mut Tally) -> Option<EtNode> {
    let name = raw.name.as_deref().unwrap_or("");
    if name.starts_with("[pytorch|profiler|execution_trace|") {
        return None;
    }
    let Some(id) = raw.id else {
        tally.bad_nodes += 1;
        return None;
    };
    let (mut rf_id, mut seq_id, mut tid) = (raw.rf_id, raw.seq_id, raw.tid);
    let mut op_schema = raw.op_schema.clone();
    for a in raw.attrs.iter().flatten() {
        match a.name.as_ref() {
            "rf_id" => rf_id = int(a.value).or(rf_id),
            "seq_id" => seq_id = int(a.value).or(seq_id),
            "tid" => tid = int(a.value).or(tid),
            "op_schema" => {
                if let Some(v) = a.value {
                    if let Ok(s) = serde_json::from_str::<Cow<str>>(v.get()) {
                        op_schema = Some(s);
                    }
                }
            }
            _ => {}
        }
    }
    let op_schema = op_schema.filter(|s| !s.is_empty());
    let (arg_alias, ret_alias) = op_schema.as_deref().map(schema_aliases).unwrap_or_default();
    let inputs = args_of(raw.inputs, raw.input_shapes, raw.input_types);
    let outputs = args_of(raw.outputs, raw.output_shapes, raw.output_types);
    let inputs = tensors(&inputs, &arg_alias, names, tally);
    let outputs = tensors(&outputs, &ret_alias, names, tally);
    let alias = ret_alias.iter().copied().max().unwrap_or_default();
    Some(EtNode {
        id,
        name: names.get(name),
        parent: raw.ctrl_deps.or(raw.parent),
        rf_id,
        seq_id: seq_id.filter(|&s| s >= 0),
        tid,
        op: None,
        op_schema: op_schema.map(|s| crate::text::cleaned(&s).into_boxed_str()),
        alias,
        inputs,
        outputs,
    })
}

/// The arguments of one side, from either layout: an object (schema 1.1) or a flat
/// value array with separate shapes and types (schema 1.0).
fn args_of<'a>(
    side: Option<&'a RawValue>,
    shapes: Option<&'a RawValue>,
    types: Option<&'a RawValue>,
) -> RawArgs<'a> {
    let Some(side) = side else {
        return RawArgs::default();
    };
    let text = side.get().trim_start();
    if text.starts_with('{') {
        return serde_json::from_str(side.get()).unwrap_or_default();
    }
    let parse = |v: Option<&'a RawValue>| -> Vec<&'a RawValue> {
        v.and_then(|v| serde_json::from_str(v.get()).ok())
            .unwrap_or_default()
    };
    RawArgs {
        values: parse(Some(side)),
        shapes: parse(shapes),
        types: types
            .and_then(|v| serde_json::from_str(v.get()).ok())
            .unwrap_or_default(),
        strides: Vec::new(),
    }
}

/// The tensors among `args`, flattening tensor lists.
fn tensors(
    args: &RawArgs,
    alias: &[AliasKind],
    names: &mut Names,
    tally: &mut Tally,
) -> Vec<EtTensor> {
    let mut out = Vec::new();
    for (i, ty) in args.types.iter().enumerate() {
        let Ok(arg) = u16::try_from(i) else {
            break;
        };
        let a = alias.get(i).copied().unwrap_or_default();
        let value = args.values.get(i).copied();
        let shape = args.shapes.get(i).copied();
        let stride = args.strides.get(i).copied();
        if let Some(dtype) = tensor_dtype(ty) {
            match tensor(value, shape, stride, dtype, names) {
                Some(mut t) => {
                    t.arg = arg;
                    t.alias = a;
                    out.push(t);
                }
                None if dtype.contains("nullptr") => {}
                None => tally.bad_tensors += 1,
            }
        } else if let Some(inner) = ty
            .strip_prefix("GenericList[")
            .and_then(|s| s.strip_suffix(']'))
        {
            if !inner.contains("Tensor(") {
                continue;
            }
            let (values, shapes, strides) = (raw_list(value), raw_list(shape), raw_list(stride));
            for (j, ety) in split_top(inner, ',').into_iter().enumerate() {
                let Some(dtype) = tensor_dtype(ety) else {
                    continue;
                };
                let Ok(j16) = u16::try_from(j) else {
                    break;
                };
                let v = values.get(j).copied();
                match tensor(
                    v,
                    shapes.get(j).copied(),
                    strides.get(j).copied(),
                    dtype,
                    names,
                ) {
                    Some(mut t) => {
                        t.arg = arg;
                        t.list_index = Some(j16);
                        t.alias = a;
                        out.push(t);
                    }
                    None if dtype.contains("nullptr") => {}
                    None => tally.bad_tensors += 1,
                }
            }
        }
    }
    out
}

/// The elements of a JSON array (empty when `v` is not one).
fn raw_list(v: Option<&RawValue>) -> Vec<&RawValue> {
    v.and_then(|v| serde_json::from_str(v.get()).ok())
        .unwrap_or_default()
}

/// `Tensor(float)` → `float`; `None` for other types.
fn tensor_dtype(ty: &str) -> Option<&str> {
    ty.trim()
        .strip_prefix("Tensor(")
        .and_then(|s| s.strip_suffix(')'))
}

fn int_list(v: Option<&RawValue>) -> Vec<i64> {
    v.and_then(|v| serde_json::from_str::<Vec<i64>>(v.get()).ok())
        .unwrap_or_default()
}

/// One tensor from its value `[tensor_id, storage_id, offset, numel, itemsize, device]`.
fn tensor(
    value: Option<&RawValue>,
    shape: Option<&RawValue>,
    strides: Option<&RawValue>,
    dtype: &str,
    names: &mut Names,
) -> Option<EtTensor> {
    let v: Vec<serde_json::Value> = serde_json::from_str(value?.get()).ok()?;
    if v.len() < 5 {
        return None;
    }
    let n = |i: usize| v.get(i).and_then(serde_json::Value::as_u64);
    let (tensor_id, storage_id, offset, numel, itemsize) = (n(0)?, n(1)?, n(2)?, n(3)?, n(4)?);
    if dtype.contains("nullptr") || (storage_id == 0 && numel == 0 && itemsize == 0) {
        // An undefined tensor (`Tensor(nullptr (uninitialized))`).
        return None;
    }
    let device = v.get(5).and_then(serde_json::Value::as_str).unwrap_or("");
    Some(EtTensor {
        arg: 0,
        list_index: None,
        tensor_id,
        storage_id,
        offset_elems: offset,
        numel,
        itemsize: u32::try_from(itemsize).unwrap_or(u32::MAX),
        device: names.get(device),
        shape: int_list(shape),
        strides: int_list(strides),
        dtype: names.get(dtype),
        alias: AliasKind::None,
    })
}

/// Split `s` at `sep` outside brackets (`()`, `[]`, `{}`; not `<>`, which `->` uses).
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(s[start..i].trim());
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last);
    }
    out
}

/// Alias annotations of an operator schema's arguments (keyword-only ones included,
/// in order, as the execution trace records them) and returns.
pub fn schema_aliases(schema: &str) -> (Vec<AliasKind>, Vec<AliasKind>) {
    let Some(open) = schema.find('(') else {
        return Default::default();
    };
    let mut depth = 0i32;
    let mut close = None;
    for (i, c) in schema[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(close) = close else {
        return Default::default();
    };
    let args: Vec<AliasKind> = split_top(&schema[open + 1..close], ',')
        .into_iter()
        .filter(|a| *a != "*")
        .map(annotation)
        .collect();
    let rest = schema[close + 1..].trim_start();
    let rets = rest.strip_prefix("->").map(str::trim).unwrap_or("");
    let rets: Vec<AliasKind> = match rets.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        Some(inner) => split_top(inner, ',').into_iter().map(annotation).collect(),
        None if rets.is_empty() => Vec::new(),
        None => vec![annotation(rets)],
    };
    (args, rets)
}

/// The alias annotation of one argument or return (`Tensor(a!) self` → in place).
fn annotation(arg: &str) -> AliasKind {
    let Some(rest) = arg.trim().strip_prefix("Tensor") else {
        return AliasKind::None;
    };
    let rest = rest.strip_prefix('?').unwrap_or(rest);
    let Some(inner) = rest.strip_prefix('(') else {
        return AliasKind::None;
    };
    let inner = inner.split(')').next().unwrap_or("");
    if inner.contains('!') {
        AliasKind::InPlace
    } else if inner.trim().is_empty() {
        AliasKind::None
    } else {
        AliasKind::View
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_annotations() {
        let (a, r) =
            schema_aliases("aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)");
        assert_eq!(a, [AliasKind::View, AliasKind::None, AliasKind::None]);
        assert_eq!(r, [AliasKind::View]);
        let (a, r) = schema_aliases(
            "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        );
        assert_eq!(a, [AliasKind::InPlace, AliasKind::None, AliasKind::None]);
        assert_eq!(r, [AliasKind::InPlace]);
        let (_, r) = schema_aliases("aten::mm(Tensor self, Tensor mat2) -> Tensor");
        assert_eq!(r, [AliasKind::None]);
        let (_, r) = schema_aliases(
            "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)",
        );
        assert_eq!(r, [AliasKind::InPlace, AliasKind::InPlace]);
        let (_, r) = schema_aliases(
            "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        );
        assert_eq!(r, [AliasKind::View]);
        assert_eq!(schema_aliases(""), (vec![], vec![]));
        assert_eq!(schema_aliases("broken(Tensor(a"), (vec![], vec![]));
    }

    #[test]
    fn both_layouts_and_lists() {
        let new = br#"{"schema": "1.1.1-chakra.0.0.4", "nodes": [
          {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1,
           "inputs": {"values": [], "shapes": [], "types": [], "strides": []},
           "outputs": {"values": [], "shapes": [], "types": [], "strides": []}, "attrs": []},
          {"id": 5, "name": "aten::_foreach_add_", "ctrl_deps": 2,
           "inputs": {"values": [[[1, 2, 0, 4, 4, "cuda:0"], [3, 4, 0, 2, 4, "cuda:0"]], [87, 0, 0, 0, 0, ""]],
                      "shapes": [[[2, 2], [2]], []], "types": ["GenericList[Tensor(float),Tensor(float)]", "Tensor(nullptr (uninitialized))"],
                      "strides": [[[2, 1], [1]], []]},
           "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
           "attrs": [{"name": "rf_id", "type": "uint64", "value": 9},
                     {"name": "op_schema", "type": "string", "value": "aten::_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()"}]},
          {"id": 6, "name": "aten::bad", "inputs": {"values": [[1, 2]], "shapes": [[]], "types": ["Tensor(float)"], "strides": [[]]}},
          "not a node"
        ]}"#;
        let (et, counters, warnings) = read("t", new).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(et.schema, "1.1.1-chakra.0.0.4");
        assert_eq!(et.nodes.len(), 2);
        let n = &et.nodes[0];
        assert_eq!((n.rf_id, n.parent), (Some(9), Some(2)));
        assert_eq!(n.inputs.len(), 2);
        assert_eq!(n.inputs[1].list_index, Some(1));
        assert_eq!(n.inputs[1].shape, [2]);
        assert_eq!(n.inputs[0].alias, AliasKind::InPlace);
        assert_eq!(n.inputs[0].is_contiguous(), Some(true));
        assert_eq!(n.alias, AliasKind::None);
        assert_eq!(counters.get("et_tensor_unparseable"), 1);
        assert_eq!(counters.get("et_node_unparseable"), 1);

        let old = br#"{"schema": "1.0.1", "nodes": [
          {"name": "aten::uniform_", "id": 8, "rf_id": 4, "parent": 4, "seq_id": -1, "tid": 1,
           "op_schema": "aten::uniform_(Tensor(a!) self, float from=0., float to=1., *, Generator? generator=None) -> Tensor(a!)",
           "inputs": [[6, 7, 0, 65536, 4, "cuda:0"], 0.0, 1.0, "<None>"], "input_shapes": [[256, 256], [], [], []],
           "input_types": ["Tensor(float)", "Double", "Double", "None"],
           "outputs": [[6, 7, 0, 65536, 4, "cuda:0"]], "output_shapes": [[256, 256]], "output_types": ["Tensor(float)"]}
        ], "finish_ts": 1"#;
        let (et, _, warnings) = read("old", old).unwrap();
        assert_eq!(warnings.len(), 1, "cut short: {warnings:?}");
        let n = &et.nodes[0];
        assert_eq!((n.rf_id, n.parent, n.seq_id), (Some(4), Some(4), None));
        assert_eq!(n.alias, AliasKind::InPlace);
        assert_eq!(n.outputs[0].storage_id, 7);
        assert_eq!(n.outputs[0].shape, [256, 256]);
        assert!(n.outputs[0].strides.is_empty());
        assert_eq!(n.outputs[0].is_contiguous(), None);
        assert_eq!(n.outputs[0].bytes(), 65536 * 4);
    }

    #[test]
    fn not_an_execution_trace() {
        let e = read("k", br#"{"traceEvents": []}"#).unwrap_err();
        assert!(e.message.contains("is a Kineto trace"), "{e}");
        let e = read("x", br#"{"a": 1}"#).unwrap_err();
        assert!(e.message.contains("no \"nodes\""), "{e}");
        assert!(read("x", b"[1]").is_err());
        assert!(read("x", b"").is_err());
        let e = read("x", br#"{"schema": "1.1", "nod"#).unwrap_err();
        assert!(e.message.contains("ends early"), "{e}");
    }
}
